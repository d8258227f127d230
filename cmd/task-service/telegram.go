package main

import (
	"context"
	"flag"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/reactors"
	"github.com/clawdbot/task-service/store"
)

// telegramConfig is the TELEGRAM_* settings (DESIGN §5).
type telegramConfig struct {
	enabled      bool
	token        string
	chatID       string
	apiBase      string
	window       time.Duration
	lease        time.Duration
	waitingAfter time.Duration
}

func (c *telegramConfig) register(fs *flag.FlagSet) {
	// The token has no flag twin: command lines show up in ps.
	c.token = os.Getenv("TELEGRAM_BOT_TOKEN")
	fs.BoolVar(&c.enabled, "telegram-enabled", envBool("TELEGRAM_ENABLED", c.token != ""),
		"send Telegram notifications; false is the kill switch: nothing is recorded or sent (env TELEGRAM_ENABLED; default: on when TELEGRAM_BOT_TOKEN is set)")
	fs.StringVar(&c.chatID, "telegram-chat-id", os.Getenv("TELEGRAM_CHAT_ID"), "chat that receives the notifications (env TELEGRAM_CHAT_ID)")
	fs.StringVar(&c.apiBase, "telegram-api-base", envOr("TELEGRAM_API_BASE", "https://api.telegram.org"), "Bot API address (env TELEGRAM_API_BASE)")
	fs.DurationVar(&c.window, "telegram-window", envDuration("TELEGRAM_WINDOW", 5*time.Second),
		"notifications arriving within this window go out as one message (env TELEGRAM_WINDOW)")
	fs.DurationVar(&c.lease, "telegram-lease", envDuration("TELEGRAM_LEASE", time.Minute),
		"how long a claimed batch belongs to its instance; a crashed instance's batch is sent by another after it (env TELEGRAM_LEASE)")
	fs.DurationVar(&c.waitingAfter, "telegram-waiting-after", envDuration("TELEGRAM_WAITING_AFTER", 30*time.Minute),
		"report a queued task nobody claimed for this long (env TELEGRAM_WAITING_AFTER)")
}

// reactorConfig is the settings as the reactors package takes them.
func (c telegramConfig) reactorConfig() reactors.TelegramConfig {
	return reactors.TelegramConfig{Enabled: c.enabled, Token: c.token, ChatID: c.chatID, APIBase: c.apiBase,
		Window: c.window, Lease: c.lease, WaitingAfter: c.waitingAfter}
}

// startupMessage says at start-up whether notifications are on, and when
// they are off, what would turn them on: only the settings that are missing.
func (c telegramConfig) startupMessage() string {
	if c.enabled {
		return "telegram notifications are on"
	}
	var missing []string
	if c.token == "" {
		missing = append(missing, "TELEGRAM_BOT_TOKEN")
	}
	if c.chatID == "" {
		missing = append(missing, "TELEGRAM_CHAT_ID")
	}
	if len(missing) == 0 {
		return "telegram notifications are off (TELEGRAM_ENABLED=false); the bot token and chat are set, so TELEGRAM_ENABLED=true turns them on"
	}
	return "telegram notifications are off (set " + strings.Join(missing, " and ") + " to turn them on)"
}

// build returns the telegram reactor (for the runner) and its sender's Run.
// With the kill switch off the reactor still runs and moves its checkpoint,
// so turning notifications on later does not announce the past.
func (c telegramConfig) build(pool *pgxpool.Pool, hub *store.Hub, reg prometheus.Registerer, log zerolog.Logger) (reactors.Reactor, func(context.Context) error, error) {
	cfg := c.reactorConfig()
	cfg.Logger, cfg.Registerer = log, reg
	sender, err := reactors.NewTelegramSender(pool, hub, cfg)
	if err != nil {
		return reactors.Reactor{}, nil, err
	}
	cfg.OnEnqueue = sender.Poke
	if c.enabled {
		log.Info().Str("chat_id", c.chatID).Str("api", c.apiBase).Msg(c.startupMessage())
	} else {
		log.Info().Msg(c.startupMessage())
	}
	return reactors.NewTelegramReactor(cfg), sender.Run, nil
}
