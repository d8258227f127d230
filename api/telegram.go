package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// Telegram commands (ADR 022): Telegram's Update objects come in through
// the webhook or the getUpdates reader (telegram_poll.go), and each runs
// here once, in one transaction with the update's record and its answer,
// which goes out through the outbox like every other message.

// TelegramConfig configures the bot's commands.
type TelegramConfig struct {
	// WebhookSecret is what Telegram sends in X-Telegram-Bot-Api-Secret-Token
	// (setWebhook's secret_token); empty turns the webhook off.
	WebhookSecret string
	// AllowedChats may use the read-only commands; AdminUsers may use them
	// all, in an allowed chat or in a private chat with the bot.
	AllowedChats map[int64]bool
	AdminUsers   map[int64]bool
	// OnReply runs inside the transaction that queued an answer: wire it to
	// the sender's Poke so the answer goes out on the commit's wake.
	OnReply func()
}

// TelegramSecretHeader carries the webhook's secret token.
const TelegramSecretHeader = "X-Telegram-Bot-Api-Secret-Token"

// MaxTelegramUpdateBytes bounds a webhook body: a text message's update is
// a few kilobytes (the text itself at most 4096 characters).
const MaxTelegramUpdateBytes = 64 << 10

// TelegramUpdate is the part of Telegram's Update object the bot reads;
// the rest (and the kinds of update it does not handle) is ignored.
type TelegramUpdate struct {
	UpdateID int64            `json:"update_id" openapi:"required,min=1"`
	Message  *TelegramMessage `json:"message,omitempty"`
}

// TelegramMessage is the part of Telegram's Message the bot reads.
type TelegramMessage struct {
	MessageID int64         `json:"message_id"`
	From      *TelegramUser `json:"from,omitempty"`
	Chat      TelegramChat  `json:"chat" openapi:"required"`
	Date      int64         `json:"date"`
	Text      string        `json:"text,omitempty"`
}

// TelegramUser is the sender of a message.
type TelegramUser struct {
	ID        int64  `json:"id" openapi:"required"`
	IsBot     bool   `json:"is_bot"`
	FirstName string `json:"first_name"`
	Username  string `json:"username,omitempty"`
}

// TelegramChat is the chat a message came from.
type TelegramChat struct {
	ID   int64  `json:"id" openapi:"required"`
	Type string `json:"type" doc:"private, group, supergroup or channel"`
}

// Telegram's objects carry many more fields than the bot reads.
func (TelegramUpdate) openObject()  {}
func (TelegramMessage) openObject() {}
func (TelegramUser) openObject()    {}
func (TelegramChat) openObject()    {}

// Outcomes of an update.
const (
	TelegramRan       = "ran"       // a command from an allowed chat: run and answered
	TelegramRefused   = "refused"   // a command from elsewhere: politely refused, nothing changed
	TelegramIgnored   = "ignored"   // not a command (or not a message): nothing to answer
	TelegramDuplicate = "duplicate" // this update_id was handled before: nothing done again
)

// TelegramResult is what the webhook answers.
type TelegramResult struct {
	UpdateID int64  `json:"update_id"`
	Outcome  string `json:"outcome" openapi:"enum=ran|refused|ignored|duplicate"`
	Command  string `json:"command,omitempty"`
}

func (s *Server) telegramRoutes() []route {
	return []route{
		{method: http.MethodPost, path: "/api/v1/telegram/webhook", id: "telegramWebhook", tag: "telegram", role: rolePublic,
			summary: "Telegram's webhook: takes an Update (setWebhook with secret_token); runs a command from an allowed chat once per update_id and answers through the outbox",
			handler: s.telegramWebhook, request: TelegramUpdate{}, bodyLimit: MaxTelegramUpdateBytes,
			status: http.StatusOK, response: TelegramResult{}, errors: []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden}},
	}
}

// telegramWebhook checks the secret token before reading the body, then
// runs the update. Telegram retries anything but a 2xx, so an update that
// was refused or ignored is still a 200.
func (s *Server) telegramWebhook(c echo.Context) error {
	want := s.cfg.Telegram.WebhookSecret
	if want == "" {
		return forbidden("the Telegram webhook is off: set TELEGRAM_WEBHOOK_SECRET")
	}
	if !sameSecret(c.Request().Header.Get(TelegramSecretHeader), want) {
		return unauthenticated("wrong or missing " + TelegramSecretHeader)
	}
	raw, err := readBody(c)
	if err != nil {
		return err
	}
	u, err := ParseTelegramUpdate(raw)
	if err != nil {
		return err
	}
	res, err := s.HandleTelegramUpdate(c.Request().Context(), u)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, res)
}

// sameSecret compares in constant time, lengths included (both hashed).
func sameSecret(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// ParseTelegramUpdate reads one Update. Telegram adds fields over time, so
// unknown ones are ignored; what the bot reads must be there and typed
// right, or the error names the field.
func ParseTelegramUpdate(raw []byte) (TelegramUpdate, error) {
	var u TelegramUpdate
	if len(raw) == 0 || raw[0] != '{' {
		return u, events.Invalid("body", "must be a Telegram Update: a JSON object with update_id")
	}
	if err := json.Unmarshal(raw, &u); err != nil {
		return u, jsonError(err)
	}
	if u.UpdateID <= 0 {
		return u, events.Invalid("update_id", "is required: a positive integer (this is not a Telegram Update)")
	}
	if m := u.Message; m != nil {
		if m.Chat.ID == 0 {
			return u, events.Invalid("message.chat.id", "is required")
		}
		if m.From != nil && m.From.ID == 0 {
			return u, events.Invalid("message.from.id", "is required")
		}
	}
	return u, nil
}

// HandleTelegramUpdate runs update u once: its record (the update_id's
// unique key), the command's effect and its answer commit together. A
// second delivery of the same update_id does nothing.
func (s *Server) HandleTelegramUpdate(ctx context.Context, u TelegramUpdate) (TelegramResult, error) {
	res := TelegramResult{UpdateID: u.UpdateID, Outcome: TelegramIgnored}
	rec := store.TelegramUpdate{UpdateID: u.UpdateID}
	m := u.Message
	var cmd telegramCommand
	if m != nil {
		rec.ChatID = &m.Chat.ID
		if m.From != nil {
			rec.UserID = &m.From.ID
		}
		var isCmd bool
		if cmd, isCmd = parseTelegramCommand(m.Text); isCmd {
			res.Command = cmd.name
			res.Outcome = TelegramRefused
			if s.telegramAccess(m) != accessNone {
				res.Outcome = TelegramRan
			}
		}
	}
	rec.Command, rec.Outcome = res.Command, res.Outcome
	duplicate := false
	err := s.db.WithTx(ctx, func(tx pgx.Tx) error {
		fresh, err := s.db.RecordTelegramUpdate(ctx, tx, rec)
		if err != nil || !fresh {
			duplicate = !fresh
			return err
		}
		var reply string
		switch res.Outcome {
		case TelegramIgnored:
			return nil
		case TelegramRefused:
			told, err := s.db.RecentlyRefused(ctx, tx, m.Chat.ID, u.UpdateID)
			if err != nil || told {
				return err
			}
			reply = telegramRefusal
		default:
			reply, err = s.runTelegramCommand(ctx, tx, u.UpdateID, m, cmd)
			if err != nil {
				return err
			}
		}
		if err := s.db.QueueTelegramReply(ctx, tx, u.UpdateID, m.Chat.ID, reply); err != nil {
			return err
		}
		if s.cfg.Telegram.OnReply != nil {
			s.cfg.Telegram.OnReply()
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if duplicate {
		res.Outcome = TelegramDuplicate
	}
	return res, nil
}

// telegramRefusal answers a chat that is not on the allow-lists.
const telegramRefusal = "Sorry, I only take commands from my team's chats. Ask an admin to add this chat to TELEGRAM_ALLOWED_CHAT_IDS."

// Access levels of a message's sender.
type telegramAccessLevel int

const (
	accessNone  telegramAccessLevel = iota
	accessRead                      // an allowed chat: the commands that change nothing
	accessAdmin                     // an admin user in an allowed or private chat: every command
)

// telegramAccess decides what a message may do. An admin's private chat
// with the bot counts as allowed; an admin in a group nobody allowed does
// not, since the group would read the answers.
func (s *Server) telegramAccess(m *TelegramMessage) telegramAccessLevel {
	cfg := s.cfg.Telegram
	admin := m.From != nil && !m.From.IsBot && cfg.AdminUsers[m.From.ID]
	chatAllowed := cfg.AllowedChats[m.Chat.ID]
	switch {
	case admin && (chatAllowed || m.Chat.ID == m.From.ID):
		return accessAdmin
	case chatAllowed:
		return accessRead
	}
	return accessNone
}

// telegramMeta is the events' meta for a command: the Telegram user acts.
func telegramMeta(updateID int64, m *TelegramMessage) events.Meta {
	a := events.Actor{Kind: events.ActorTelegram, ID: "telegram:unknown"}
	if u := m.From; u != nil {
		a.ID = "telegram:" + strconv.FormatInt(u.ID, 10)
		a.Name = u.FirstName
		if u.Username != "" {
			a.Name = "@" + u.Username
		}
	}
	return events.Meta{Actor: a, RequestID: fmt.Sprintf("telegram-update-%d", updateID)}
}
