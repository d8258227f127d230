package reactors

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
)

// botAPI speaks the one Bot API method we need. The token is part of the
// URL path, so every error that may carry the URL is redacted here, before
// it can reach a log line or a last_error column.
type botAPI struct {
	base   string
	token  string
	client *http.Client
}

// sendOutcome classifies an answer for the sender.
type sendOutcome int

const (
	sendOK         sendOutcome = iota
	sendRetryAfter             // 429: wait retryAfter, then try again
	sendTransient              // 5xx, network error, timeout: back off
	sendRefused                // 401/403/404: bad token or chat; back off, keep the rows, shout
	sendRejected               // 400: this text will never go through; dead-letter
)

// metricLabel is the outcome's label in taskservice_telegram_sends_total.
func (o sendOutcome) metricLabel() string {
	switch o {
	case sendOK:
		return "sent"
	case sendRejected:
		return "rejected"
	case sendRetryAfter:
		return "rate_limited"
	}
	return "failed"
}

type sendResult struct {
	outcome     sendOutcome
	retryAfter  time.Duration
	description string // Telegram's description or the redacted error
	status      int
}

// apiResponse is the Bot API's answer envelope.
type apiResponse struct {
	OK          bool   `json:"ok"`
	ErrorCode   int    `json:"error_code"`
	Description string `json:"description"`
	Parameters  *struct {
		RetryAfter      int   `json:"retry_after"`
		MigrateToChatID int64 `json:"migrate_to_chat_id"`
	} `json:"parameters"`
}

// sendMessage posts text to chatID and classifies the answer.
func (a *botAPI) sendMessage(ctx context.Context, chatID, text string) sendResult {
	body, err := json.Marshal(map[string]any{
		"chat_id":              chatID,
		"text":                 text,
		"parse_mode":           telegramParseMode,
		"link_preview_options": map[string]bool{"is_disabled": true},
	})
	if err != nil {
		return sendResult{outcome: sendRejected, description: err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/bot"+a.token+"/sendMessage", bytes.NewReader(body))
	if err != nil {
		return sendResult{outcome: sendRefused, description: a.redact(err)}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return sendResult{outcome: sendTransient, description: a.redact(err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil && resp.StatusCode != http.StatusOK {
		return sendResult{outcome: sendTransient, status: resp.StatusCode, description: a.redact(err)}
	}
	var ans apiResponse
	parsed := json.Unmarshal(raw, &ans) == nil
	code := resp.StatusCode
	if code == http.StatusOK && (!parsed || ans.OK) {
		// A 200 means Telegram took the message. Treating an odd body as a
		// failure would only send it twice.
		return sendResult{outcome: sendOK, status: code}
	}
	if parsed && ans.ErrorCode != 0 {
		code = ans.ErrorCode
	}
	desc := strings.TrimSpace(ans.Description)
	if desc == "" {
		desc = fmt.Sprintf("HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(truncateBytes(raw, 200))))
	}
	desc = a.redactString(desc)
	res := sendResult{status: code, description: desc}
	switch {
	case code == http.StatusTooManyRequests:
		res.outcome = sendRetryAfter
		if parsed && ans.Parameters != nil && ans.Parameters.RetryAfter > 0 {
			res.retryAfter = time.Duration(ans.Parameters.RetryAfter) * time.Second
		} else {
			res.outcome = sendTransient // no hint: back off like any other failure
		}
	case code == http.StatusBadRequest && chatProblem(desc, ans):
		// "chat not found", a group upgraded to a supergroup, no rights:
		// wrong configuration, not a bad message. Keep the rows.
		res.outcome = sendRefused
	case code == http.StatusBadRequest:
		res.outcome = sendRejected
	case code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusNotFound:
		res.outcome = sendRefused
	default:
		res.outcome = sendTransient
	}
	return res
}

// chatProblem tells a 400 about the chat (the same for every message) from a
// 400 about one message (entities, length), which alone is dead-lettered.
func chatProblem(desc string, ans apiResponse) bool {
	if ans.Parameters != nil && ans.Parameters.MigrateToChatID != 0 {
		return true
	}
	d := strings.ToLower(desc)
	for _, s := range []string{"chat not found", "chat_id", "peer_id_invalid", "not enough rights", "chat_write_forbidden", "need administrator rights"} {
		if strings.Contains(d, s) {
			return true
		}
	}
	return false
}

func truncateBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// redact turns an error into text without the token. net/http errors are
// *url.Error values whose text includes the whole URL, path and all.
func (a *botAPI) redact(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = fmt.Errorf("%s %s/bot<token>/sendMessage: %w", ue.Op, a.base, ue.Err)
	}
	return a.redactString(err.Error())
}

func (a *botAPI) redactString(s string) string {
	if a.token == "" {
		return s
	}
	s = strings.ReplaceAll(s, a.token, "<token>")
	if esc := url.PathEscape(a.token); esc != a.token {
		s = strings.ReplaceAll(s, esc, "<token>")
	}
	return s
}
