package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/cmd/internal/settings"
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

	// Commands (ADR 022).
	webhookSecret string
	allowedChats  string
	adminUsers    string
	updates       string
	pollWait      time.Duration
	pollRetry     time.Duration
}

func (c *telegramConfig) register(fs *flag.FlagSet) {
	// The token has no flag twin: command lines show up in ps.
	c.token = os.Getenv("TELEGRAM_BOT_TOKEN")
	fs.BoolVar(&c.enabled, "telegram-enabled", c.token != "",
		"send Telegram notifications; false is the kill switch: nothing is recorded or sent (env TELEGRAM_ENABLED; default: on when TELEGRAM_BOT_TOKEN is set)")
	fs.StringVar(&c.chatID, "telegram-chat-id", "", "chat that receives the notifications (env TELEGRAM_CHAT_ID)")
	fs.StringVar(&c.apiBase, "telegram-api-base", "https://api.telegram.org", "Bot API address (env TELEGRAM_API_BASE)")
	fs.DurationVar(&c.window, "telegram-window", 5*time.Second,
		"notifications arriving within this window go out as one message (env TELEGRAM_WINDOW)")
	fs.DurationVar(&c.lease, "telegram-lease", time.Minute,
		"how long a claimed batch belongs to its instance; a crashed instance's batch is sent by another after it (env TELEGRAM_LEASE)")
	// The webhook's secret has no flag twin either.
	c.webhookSecret = os.Getenv("TELEGRAM_WEBHOOK_SECRET")
	fs.StringVar(&c.allowedChats, "telegram-allowed-chat-ids", "",
		"chats whose members may use the read-only commands (/status, /task, /budget, /help), comma-separated ids (env TELEGRAM_ALLOWED_CHAT_IDS)")
	fs.StringVar(&c.adminUsers, "telegram-admin-user-ids", "",
		"Telegram users who may use every command, in an allowed chat or their private chat with the bot, comma-separated ids (env TELEGRAM_ADMIN_USER_IDS)")
	settings.Choice(fs, &c.updates, "telegram-updates", "webhook", []string{"webhook", "poll"},
		"how commands arrive: webhook (POST /api/v1/telegram/webhook, on when TELEGRAM_WEBHOOK_SECRET is set) or poll (getUpdates, one instance at a time) (env TELEGRAM_UPDATES)")
	fs.DurationVar(&c.pollWait, "telegram-poll-wait", 30*time.Second,
		"getUpdates' long-poll timeout (env TELEGRAM_POLL_WAIT)")
	fs.DurationVar(&c.pollRetry, "telegram-poll-retry", 5*time.Second,
		"how often an instance that is not reading getUpdates tries to take over (env TELEGRAM_POLL_RETRY)")
	fs.DurationVar(&c.waitingAfter, "telegram-waiting-after", 30*time.Minute,
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

// build returns the telegram reactor (for the runner) and its sender.
// With the kill switch off the reactor still runs and moves its checkpoint
// (on the catch-up ticker and at stop, not on every commit: it is dormant),
// so turning notifications on later does not announce the past.
func (c telegramConfig) build(pool *pgxpool.Pool, hub *store.Hub, reg prometheus.Registerer, log zerolog.Logger) (reactors.Reactor, *reactors.TelegramSender, error) {
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
	return reactors.NewTelegramReactor(cfg), sender, nil
}

// commandsConfig is the commands' settings as the API takes them; it
// fails on a setting that cannot work, naming it.
func (c telegramConfig) commandsConfig() (api.TelegramConfig, error) {
	var out api.TelegramConfig
	var err error
	if out.AllowedChats, err = idSet("TELEGRAM_ALLOWED_CHAT_IDS", c.allowedChats); err != nil {
		return out, err
	}
	if out.AdminUsers, err = idSet("TELEGRAM_ADMIN_USER_IDS", c.adminUsers); err != nil {
		return out, err
	}
	switch c.updates {
	case "webhook":
		out.WebhookSecret = c.webhookSecret
	case "poll":
	default:
		return out, fmt.Errorf("TELEGRAM_UPDATES must be webhook or poll, not %q", c.updates)
	}
	if c.commandsOn() && !c.enabled {
		return out, errors.New("Telegram commands answer through the notifications' outbox: set TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID " +
			"(and leave TELEGRAM_ENABLED on), or unset TELEGRAM_WEBHOOK_SECRET and TELEGRAM_UPDATES")
	}
	return out, nil
}

// commandsOn says whether commands can arrive at all.
func (c telegramConfig) commandsOn() bool {
	return c.updates == "poll" || c.webhookSecret != ""
}

// idSet reads comma-separated Telegram ids (a group's are negative).
func idSet(name, list string) (map[int64]bool, error) {
	out := map[int64]bool{}
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		id, err := strconv.ParseInt(f, 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("%s: %q is not a Telegram id (an integer; a group's is negative)", name, f)
		}
		out[id] = true
	}
	return out, nil
}

// poller is the getUpdates reader when TELEGRAM_UPDATES=poll, else nil.
func (c telegramConfig) poller(srv *api.Server, databaseURL, instanceID string, log zerolog.Logger) (*api.TelegramPoller, error) {
	if c.updates != "poll" {
		return nil, nil
	}
	return api.NewTelegramPoller(srv, api.TelegramPollerConfig{DatabaseURL: databaseURL, InstanceID: instanceID,
		APIBase: c.apiBase, Token: c.token, Wait: c.pollWait, Retry: c.pollRetry, Logger: log})
}
