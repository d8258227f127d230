package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
)

// TelegramPollerConfig configures the getUpdates reader, for a bot without
// a public URL (TELEGRAM_UPDATES=poll).
type TelegramPollerConfig struct {
	DatabaseURL string // the lock's own connection
	InstanceID  string // names the lock's connection (application_name)
	APIBase     string // default https://api.telegram.org
	Token       string
	// Wait is getUpdates' long-poll timeout (default 30 s).
	Wait time.Duration
	// Retry is how often an instance that does not hold the lock tries to
	// take it, and the pause after a failed getUpdates (default 5 s).
	Retry  time.Duration
	Logger zerolog.Logger
}

// telegramPollLock is the session advisory lock (class, key) the reader
// holds on its own connection: one instance reads at a time, and when its
// process or connection dies PostgreSQL releases the lock and another
// instance takes over.
const (
	telegramPollLockClass = 0x74676d // "tgm"
	telegramPollLockKey   = 1
)

// TelegramPoller reads updates with getUpdates and runs them like the
// webhook does.
type TelegramPoller struct {
	srv    *Server
	cfg    TelegramPollerConfig
	client *http.Client
	log    zerolog.Logger
}

// NewTelegramPoller returns a reader for srv's commands; Run starts it.
func NewTelegramPoller(srv *Server, cfg TelegramPollerConfig) (*TelegramPoller, error) {
	if cfg.Token == "" {
		return nil, errors.New("TELEGRAM_UPDATES=poll needs TELEGRAM_BOT_TOKEN")
	}
	if cfg.APIBase == "" {
		cfg.APIBase = "https://api.telegram.org"
	}
	cfg.APIBase = strings.TrimRight(cfg.APIBase, "/")
	if cfg.Wait <= 0 {
		cfg.Wait = 30 * time.Second
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 5 * time.Second
	}
	return &TelegramPoller{srv: srv, cfg: cfg, client: &http.Client{Timeout: cfg.Wait + 15*time.Second},
		log: cfg.Logger.With().Str("component", "telegram-poller").Logger()}, nil
}

// Run tries to take the lock until ctx ends; holding it, it reads updates.
func (p *TelegramPoller) Run(ctx context.Context) error {
	for {
		if err := p.holdAndRead(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn().Err(err).Msg("telegram updates: reading stopped; trying again")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(p.cfg.Retry):
		}
	}
}

// holdAndRead takes the lock on a connection of its own, or returns at once
// when another instance holds it; holding it, it reads until ctx ends or
// the connection fails.
func (p *TelegramPoller) holdAndRead(ctx context.Context) error {
	cc, err := pgx.ParseConfig(p.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	cc.RuntimeParams["application_name"] = "task-service telegram poller " + p.cfg.InstanceID
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("connect for the poller's lock: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var held bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1::int4, $2::int4)`,
		int32(telegramPollLockClass), int32(telegramPollLockKey)).Scan(&held); err != nil {
		return fmt.Errorf("take the poller's lock: %w", err)
	}
	if !held {
		return nil
	}
	p.log.Info().Msg("telegram updates: this instance reads getUpdates")
	offset, err := p.srv.db.NextTelegramUpdate(ctx)
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		// The lock lives as long as its connection: a dead one means
		// another instance may read already.
		if err := conn.Ping(ctx); err != nil {
			return fmt.Errorf("the poller's lock connection failed: %w", err)
		}
		updates, err := p.getUpdates(ctx, offset)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.log.Warn().Err(err).Msg("telegram getUpdates failed (a webhook set on the bot makes it fail: deleteWebhook)")
			select {
			case <-ctx.Done():
			case <-time.After(p.cfg.Retry):
			}
			continue
		}
		for _, raw := range updates {
			next, err := p.handle(ctx, raw)
			if err != nil {
				return err // not confirmed: read again after the pause
			}
			offset = max(offset, next)
		}
	}
	return nil
}

// handle runs one update and returns the offset past it. An update that is
// not one the bot can read is logged and skipped, or it would come back
// forever.
func (p *TelegramPoller) handle(ctx context.Context, raw json.RawMessage) (int64, error) {
	u, err := ParseTelegramUpdate(raw)
	if err != nil {
		var id struct {
			UpdateID int64 `json:"update_id"`
		}
		_ = json.Unmarshal(raw, &id)
		p.log.Warn().Err(err).Int64("update_id", id.UpdateID).Msg("telegram updates: skipped an update the bot cannot read")
		return id.UpdateID + 1, nil
	}
	res, err := p.srv.HandleTelegramUpdate(ctx, u)
	if err != nil {
		return 0, err
	}
	p.log.Debug().Int64("update_id", u.UpdateID).Str("outcome", res.Outcome).Str("command", res.Command).Msg("telegram update")
	return u.UpdateID + 1, nil
}

// getUpdates long-polls for the updates from offset on; passing an offset
// confirms every update before it to Telegram.
func (p *TelegramPoller) getUpdates(ctx context.Context, offset int64) ([]json.RawMessage, error) {
	body, _ := json.Marshal(map[string]any{"offset": offset, "timeout": int(p.cfg.Wait.Seconds()), "allowed_updates": []string{"message"}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.APIBase+"/bot"+p.cfg.Token+"/getUpdates", bytes.NewReader(body))
	if err != nil {
		return nil, errors.New("getUpdates: bad TELEGRAM_API_BASE")
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text has the URL, and the URL the token
		}
		return nil, fmt.Errorf("getUpdates: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("getUpdates: read the answer: %w", err)
	}
	var ans struct {
		OK          bool              `json:"ok"`
		Description string            `json:"description"`
		Result      []json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("getUpdates: HTTP %d, not the Bot API's answer", resp.StatusCode)
	}
	if !ans.OK {
		return nil, fmt.Errorf("getUpdates: HTTP %d: %s", resp.StatusCode, strings.ReplaceAll(ans.Description, p.cfg.Token, "<token>"))
	}
	return ans.Result, nil
}
