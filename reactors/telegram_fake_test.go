package reactors

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"
)

// fakeBot is an httptest server that speaks the part of the Telegram Bot API
// the sender uses: POST /bot<token>/sendMessage with a JSON body. Like
// Telegram it checks the chat, parses the text for the parse mode (HTML, the
// subset Telegram accepts), rejects what it cannot parse or what is too long
// with a 400 and Telegram's wording, and answers {"ok":true,"result":...}.
// A script can make any request answer 429 or 500, answer with any raw
// body, or answer slowly.
type fakeBot struct {
	token, chatID string
	srv           *httptest.Server

	mu       sync.Mutex
	script   func(n int) fakeAnswer // nil: every request is answered normally
	requests []fakeRequest
	accepted []fakeMessage
}

// fakeAnswer overrides the normal answer to one request.
type fakeAnswer struct {
	status     int           // 0: answer normally (after delay)
	retryAfter int           // with 429
	delay      time.Duration // answer this late (a client that gives up first is not served)
	body       string        // raw body instead of the canned one (malformed answers)
}

type fakeRequest struct {
	At     time.Time
	Status int
}

type fakeMessage struct {
	ID    int64
	Chat  string
	Raw   string
	Plain string
}

func newFakeBot(t *testing.T, token, chatID string) *fakeBot {
	f := &fakeBot{token: token, chatID: chatID}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeBot) setScript(s func(n int) fakeAnswer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = s
}

func (f *fakeBot) messages() []fakeMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeMessage(nil), f.accepted...)
}

func (f *fakeBot) log() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.requests...)
}

func writeAPI(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, desc string, params map[string]any) {
	body := map[string]any{"ok": false, "error_code": status, "description": desc}
	if params != nil {
		body["parameters"] = params
	}
	writeAPI(w, status, body)
}

func (f *fakeBot) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	n := len(f.requests)
	var ans fakeAnswer
	if f.script != nil {
		ans = f.script(n)
	}
	f.requests = append(f.requests, fakeRequest{At: time.Now()})
	f.mu.Unlock()
	status := f.answer(w, r, ans)
	f.mu.Lock()
	f.requests[n].Status = status
	f.mu.Unlock()
}

func (f *fakeBot) answer(w http.ResponseWriter, r *http.Request, ans fakeAnswer) int {
	// Read the whole body first: only then does net/http notice a client
	// that hangs up, and cancel r.Context().
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return -1
	}
	if ans.delay > 0 {
		select {
		case <-time.After(ans.delay):
		case <-r.Context().Done():
			return -1 // the client gave up: nothing delivered
		}
	}
	if r.URL.Path != "/bot"+f.token+"/sendMessage" {
		apiError(w, http.StatusNotFound, "Not Found", nil)
		return http.StatusNotFound
	}
	if ans.body != "" {
		w.WriteHeader(ans.status)
		_, _ = w.Write([]byte(ans.body))
		return ans.status
	}
	switch ans.status {
	case http.StatusTooManyRequests:
		apiError(w, 429, fmt.Sprintf("Too Many Requests: retry after %d", ans.retryAfter),
			map[string]any{"retry_after": ans.retryAfter})
		return 429
	case http.StatusInternalServerError, http.StatusBadGateway:
		apiError(w, ans.status, "Internal Server Error", nil)
		return ans.status
	}
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		apiError(w, 400, "Bad Request: expected a JSON POST", nil)
		return 400
	}
	var req struct {
		ChatID    json.RawMessage `json:"chat_id"`
		Text      string          `json:"text"`
		ParseMode string          `json:"parse_mode"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		apiError(w, 400, "Bad Request: invalid JSON", nil)
		return 400
	}
	chat := strings.Trim(string(req.ChatID), `"`)
	if chat != f.chatID {
		apiError(w, 400, "Bad Request: chat not found", nil)
		return 400
	}
	if strings.TrimSpace(req.Text) == "" {
		apiError(w, 400, "Bad Request: message text is empty", nil)
		return 400
	}
	if req.ParseMode != "HTML" {
		apiError(w, 400, "Bad Request: this fake expects parse_mode HTML, got "+strconv.Quote(req.ParseMode), nil)
		return 400
	}
	plain, err := parseTelegramHTML(req.Text)
	if err != nil {
		apiError(w, 400, "Bad Request: can't parse entities: "+err.Error(), nil)
		return 400
	}
	if len(utf16.Encode([]rune(plain))) > 4096 {
		apiError(w, 400, "Bad Request: message is too long", nil)
		return 400
	}
	f.mu.Lock()
	id := int64(len(f.accepted) + 1)
	f.accepted = append(f.accepted, fakeMessage{ID: id, Chat: chat, Raw: req.Text, Plain: plain})
	f.mu.Unlock()
	writeAPI(w, 200, map[string]any{"ok": true, "result": map[string]any{
		"message_id": id, "date": time.Now().Unix(), "chat": map[string]any{"id": chat, "type": "group"}, "text": plain,
	}})
	return 200
}

// parseTelegramHTML returns the plain text of a message in Telegram's HTML
// parse mode, or the error Telegram would give: only its tags, properly
// nested; &lt; &gt; &amp; &quot; and numeric entities; no bare < > or &.
func parseTelegramHTML(s string) (string, error) {
	allowed := map[string]bool{"b": true, "strong": true, "i": true, "em": true, "u": true, "ins": true,
		"s": true, "strike": true, "del": true, "code": true, "pre": true, "a": true, "tg-spoiler": true,
		"span": true, "blockquote": true, "tg-emoji": true}
	var out strings.Builder
	var stack []string
	for i := 0; i < len(s); {
		switch s[i] {
		case '<':
			end := strings.IndexByte(s[i:], '>')
			if end < 0 {
				return "", fmt.Errorf("unclosed start tag at byte offset %d", i)
			}
			tag := s[i+1 : i+end]
			closing := strings.HasPrefix(tag, "/")
			name := strings.TrimPrefix(tag, "/")
			if sp := strings.IndexAny(name, " \t\n"); sp >= 0 {
				name = name[:sp]
			}
			if !allowed[name] {
				return "", fmt.Errorf("unsupported start tag %q at byte offset %d", name, i)
			}
			if closing {
				if len(stack) == 0 || stack[len(stack)-1] != name {
					return "", fmt.Errorf("unexpected end tag at byte offset %d", i)
				}
				stack = stack[:len(stack)-1]
			} else {
				stack = append(stack, name)
			}
			i += end + 1
		case '>':
			return "", fmt.Errorf("unexpected '>' at byte offset %d", i)
		case '&':
			end := strings.IndexByte(s[i:], ';')
			if end < 0 || end > 10 {
				return "", fmt.Errorf("can't find end of the entity starting at byte offset %d", i)
			}
			ent := s[i+1 : i+end]
			switch {
			case ent == "lt":
				out.WriteByte('<')
			case ent == "gt":
				out.WriteByte('>')
			case ent == "amp":
				out.WriteByte('&')
			case ent == "quot":
				out.WriteByte('"')
			case strings.HasPrefix(ent, "#"):
				n, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimPrefix(ent, "#"), "x"), map[bool]int{true: 16, false: 10}[strings.HasPrefix(ent, "#x")], 32)
				if err != nil {
					return "", fmt.Errorf("unsupported HTML entity at byte offset %d", i)
				}
				out.WriteRune(rune(n))
			default:
				return "", fmt.Errorf("unsupported HTML entity %q at byte offset %d", ent, i)
			}
			i += end + 1
		default:
			out.WriteByte(s[i])
			i++
		}
	}
	if len(stack) > 0 {
		return "", fmt.Errorf("can't find end tag corresponding to start tag %q", stack[len(stack)-1])
	}
	return out.String(), nil
}
