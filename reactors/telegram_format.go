package reactors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// Messages use parse_mode HTML (ADR: docs/adr/004-telegram-outbox.md): only
// <, > and & need escaping, where MarkdownV2 needs eighteen characters and a
// backslash escaped differently inside and outside entities. Every piece of
// user text goes through esc; nothing else is ever interpolated raw.

// telegramParseMode is the parse_mode of every message.
const telegramParseMode = "HTML"

// telegramMaxMessage is Telegram's limit on one message, counted in UTF-16
// code units of the text after entity parsing. We count bytes of the raw
// HTML, which is never fewer (tags and entities only add, and a UTF-8
// sequence is at least as long as its UTF-16 form), so we stay under it.
const telegramMaxMessage = 4096

// Budgets for user text inside one line, in escaped bytes. They keep every
// line far below telegramMaxMessage, so splitting at line ends always works.
const (
	budgetTitle   = 1200
	budgetName    = 200
	budgetReason  = 900
	budgetHint    = 600
	summaryRunes  = 200 // result summary, in characters before escaping
	budgetSummary = 1000
)

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// esc makes user text safe for parse_mode HTML: it flattens whitespace (a
// notification is one line), escapes &, < and >, and cuts the result at
// budget escaped bytes with an ellipsis, never inside an entity.
func esc(s string, budget int) string {
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " ")
	if full := htmlEscaper.Replace(s); len(full) <= budget {
		return full
	}
	var b strings.Builder
	for _, r := range s {
		piece := htmlEscaper.Replace(string(r))
		if b.Len()+len(piece) > budget-len("…") {
			break
		}
		b.WriteString(piece)
	}
	return b.String() + "…"
}

// bold wraps already-escaped text.
func bold(escaped string) string { return "<b>" + escaped + "</b>" }

// retrySuffix is what the retry reactor appends to a retry's title.
var retrySuffix = regexp.MustCompile(` \(retry \d+\)$`)

// baseTitle strips " (retry N)" so a chain is named after its original.
func baseTitle(title string) string { return retrySuffix.ReplaceAllString(title, "") }

// plural says "1 task" / "2 tasks".
func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// summarizeResult turns a worker's result JSON into at most summaryRunes
// characters of plain text: a string as it is; an object by its "summary"
// (or message/status/text) field when it has one, else its scalar fields
// "key: value" and the sizes of its lists; a list by its length.
func summarizeResult(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return ""
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return cutRunes(string(raw), summaryRunes)
	}
	return cutRunes(summarizeValue(v), summaryRunes)
}

func summarizeValue(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		return plural(len(x), "item", "items")
	case map[string]any:
		for _, k := range []string{"summary", "message", "status", "text", "result"} {
			if s, ok := x[k].(string); ok && strings.TrimSpace(s) != "" {
				return s
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			switch y := x[k].(type) {
			case map[string]any:
				continue // nested detail does not fit a one-line summary
			case []any:
				parts = append(parts, fmt.Sprintf("%s: %s", k, plural(len(y), "item", "items")))
			case nil:
				continue
			default:
				parts = append(parts, fmt.Sprintf("%s: %v", k, y))
			}
		}
		return strings.Join(parts, ", ")
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}

// cutRunes keeps at most n characters, ending with an ellipsis when cut.
func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// retryFact is what the log says about an outbox row's event: its task
// and, for task.retried, the retry it created.
type retryFact struct{ taskID, retryTaskID string }

// decisionOutcome maps the retry reactor's decisions to their outcomes.
var decisionOutcome = map[string]string{kindRetried: events.RetryOutcomeRetried,
	kindRetrySkipped: events.RetryOutcomeSkipped, kindExhausted: events.RetryOutcomeExhausted}

// settleRetries replaces the provisional retry answer of each failure line
// in rows (one batch, in time order) by the first decision a row of the
// batch reports for that task, or by the provisional answer itself, so no
// marker leaves. facts names each row's task by its event.
func settleRetries(rows []outboxRow, facts map[int64]retryFact) {
	decided := map[string]string{}
	for _, r := range rows {
		f, ok := facts[r.EventSeq]
		if outcome := decisionOutcome[r.Kind]; ok && outcome != "" {
			if _, seen := decided[f.taskID]; !seen {
				decided[f.taskID] = retryDecided(outcome, f.retryTaskID)
			}
		}
	}
	for i, r := range rows {
		answer := ""
		if f, ok := facts[r.EventSeq]; ok && r.Kind == kindFailed {
			answer = decided[f.taskID]
		}
		rows[i].Text = settleRetry(r.Text, answer)
	}
}

// settleRetry puts answer (or, if "", the provisional one) in place of the
// marked provisional answer in text.
func settleRetry(text, answer string) string {
	before, rest, ok := strings.Cut(text, retryOpen)
	if !ok {
		return text
	}
	provisional, after, _ := strings.Cut(rest, retryClose)
	if answer == "" {
		answer = provisional
	}
	return before + answer + after
}

// chunk is one sendMessage: its text and the outbox rows it carries, and
// the chat it goes to when not the configured one (an answer to a command).
type chunk struct {
	text   string
	rows   []outboxRow
	chatID string
}

// splitReplies separates the answers to commands, each a message of its
// own to the chat that asked, from the notifications, which are batched.
func splitReplies(rows []outboxRow) (replies []chunk, notes []outboxRow) {
	for _, r := range rows {
		if r.Kind == store.TelegramReplyKind {
			replies = append(replies, chunk{text: r.Text, rows: []outboxRow{r}, chatID: r.ChatID})
			continue
		}
		notes = append(notes, r)
	}
	return replies, notes
}

// composeMessages turns claimed rows (same chat) into messages: one row is
// its own line; several get a header "N updates" and one line each. A
// message that would pass Telegram's limit is split at line ends, each part
// carrying its own rows, so a failure of one part affects only its rows.
// A digest is always a message of its own.
func composeMessages(rows []outboxRow) []chunk {
	var alone []chunk
	rest := make([]outboxRow, 0, len(rows))
	for _, r := range rows {
		if r.Kind == kindDigest {
			alone = append(alone, chunk{text: r.Text, rows: []outboxRow{r}})
		} else {
			rest = append(rest, r)
		}
	}
	if len(rest) == 0 {
		return alone
	}
	return append(alone, composeUpdates(rest)...)
}

// composeUpdates is composeMessages for rows that may share a message.
func composeUpdates(rows []outboxRow) []chunk {
	if len(rows) == 1 {
		return []chunk{{text: rows[0].Text, rows: rows}}
	}
	header := func(part, parts int) string {
		h := "📬 " + bold(fmt.Sprintf("%d updates", len(rows)))
		if parts > 1 {
			h += fmt.Sprintf(" (%d/%d)", part, parts)
		}
		return h
	}
	// Reserve room for the longest header any part can get.
	room := telegramMaxMessage - len(header(99, 99)) - 1
	var out []chunk
	cur := chunk{}
	size := 0
	for _, r := range rows {
		if len(cur.rows) > 0 && size+1+len(r.Text) > room {
			out = append(out, cur)
			cur, size = chunk{}, 0
		}
		cur.rows = append(cur.rows, r)
		size += 1 + len(r.Text)
	}
	out = append(out, cur)
	for i := range out {
		lines := make([]string, 0, len(out[i].rows)+1)
		lines = append(lines, header(i+1, len(out)))
		for _, r := range out[i].rows {
			lines = append(lines, r.Text)
		}
		out[i].text = strings.Join(lines, "\n")
	}
	return out
}
