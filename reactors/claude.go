package reactors

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/clawdbot/task-service/events"
)

// Retry intelligence (seed design §7b): for a failure of kind error, one call
// to the Claude Messages API asks for a one-or-two-sentence instruction for
// the retry, or SKIP when the failure looks permanent. Anything but a sane
// answer falls back to the template: the retry never waits on Claude for
// longer than its timeout and never depends on it.

// AdviceRequest is what the advisor is told about a failure.
type AdviceRequest struct {
	TaskTitle   string
	TaskType    string
	Description string
	Reason      string
	// Attempt is the attempt that failed (1 = the original), of MaxAttempts.
	Attempt, MaxAttempts int
	// TaskID is the failed task, which the call's own usage is recorded on
	// (never sent to the model).
	TaskID string
}

// Advice is the advisor's verdict.
type Advice struct {
	// Skip: the failure looks permanent; Reason says why.
	Skip   bool
	Reason string
	// Hint is the instruction for the retry ("" = the template alone).
	Hint string
	// Usage is what the call itself spent, when the API said so; set even
	// when the answer could not be used (the tokens were spent anyway).
	Usage *events.UsageReport
}

// Advisor advises on a failure. An error means "use the template".
type Advisor interface {
	Advise(ctx context.Context, req AdviceRequest) (Advice, error)
}

// ClaudeConfig configures the Claude advisor.
type ClaudeConfig struct {
	APIKey string
	// BaseURL defaults to https://api.anthropic.com (tests point it at a fake).
	BaseURL string
	// Model defaults to claude-sonnet-4-5.
	Model string
	// Timeout bounds one call (default 10 s).
	Timeout time.Duration
	// MaxTokens bounds the answer (default 200).
	MaxTokens int
	// HTTPClient defaults to a plain client; Timeout applies either way.
	HTTPClient *http.Client
}

// Claude is an Advisor backed by the Anthropic Messages API.
type Claude struct {
	cfg ClaudeConfig
}

// NewClaude checks cfg and fills its defaults.
func NewClaude(cfg ClaudeConfig) (*Claude, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("reactors: ClaudeConfig.APIKey is required")
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = "https://api.anthropic.com"
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.Model == "" {
		cfg.Model = "claude-sonnet-4-5"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 200
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	return &Claude{cfg: cfg}, nil
}

// Limits on what goes into the prompt and what may come back.
const (
	maxPromptDescription = 2000
	maxPromptReason      = 4000
	maxHintLen           = 1000
	maxClaudeResponse    = 1 << 20
)

const claudeSystem = "You advise the automatic retry system of a task queue whose workers are AI coding agents. " +
	"You answer with one short plain-text instruction, never markup."

const claudeAsk = `Generate a 1-2 sentence instruction for the retry, explaining what to do differently. ` +
	`Answer with the instruction only. If the error looks permanent (invalid data, a missing API, something no retry can fix), ` +
	`respond with SKIP followed by a colon and a one-sentence reason.`

func (c *Claude) prompt(req AdviceRequest) string {
	var sb strings.Builder
	sb.WriteString("A task failed with this error:\n")
	sb.WriteString(clip(req.Reason, maxPromptReason))
	fmt.Fprintf(&sb, "\n\nTask: %s\nTask type: %s\nFailed attempt: %d of at most %d\n",
		clip(req.TaskTitle, 500), req.TaskType, req.Attempt, req.MaxAttempts)
	if d := strings.TrimSpace(req.Description); d != "" {
		sb.WriteString("Task description (may be cut short):\n")
		sb.WriteString(clip(d, maxPromptDescription))
		sb.WriteString("\n")
	}
	sb.WriteString("\n")
	sb.WriteString(claudeAsk)
	return sb.String()
}

type claudeRequest struct {
	Model     string          `json:"model"`
	MaxTokens int             `json:"max_tokens"`
	System    string          `json:"system"`
	Messages  []claudeMessage `json:"messages"`
}

type claudeMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type claudeResponse struct {
	Type       string `json:"type"`
	Model      string `json:"model"`
	StopReason string `json:"stop_reason"`
	Usage      *struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	} `json:"usage"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// Advise makes the one call. Errors (HTTP, timeout, an error body, an answer
// that is empty, too long, cut off or markup) mean "use the template".
func (c *Claude) Advise(ctx context.Context, req AdviceRequest) (Advice, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	body, err := json.Marshal(claudeRequest{
		Model: c.cfg.Model, MaxTokens: c.cfg.MaxTokens, System: claudeSystem,
		Messages: []claudeMessage{{Role: "user", Content: c.prompt(req)}},
	})
	if err != nil {
		return Advice{}, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.BaseURL+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return Advice{}, fmt.Errorf("claude: %w", err)
	}
	hreq.Header.Set("content-type", "application/json")
	hreq.Header.Set("x-api-key", c.cfg.APIKey)
	hreq.Header.Set("anthropic-version", "2023-06-01")
	resp, err := c.cfg.HTTPClient.Do(hreq)
	if err != nil {
		return Advice{}, fmt.Errorf("claude: %w", redactKey(err, c.cfg.APIKey))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxClaudeResponse))
	if err != nil {
		return Advice{}, fmt.Errorf("claude: read answer: %w", err)
	}
	var out claudeResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return Advice{}, fmt.Errorf("claude: %d, not JSON: %.100q", resp.StatusCode, raw)
	}
	if resp.StatusCode != http.StatusOK || out.Error != nil {
		msg := http.StatusText(resp.StatusCode)
		if out.Error != nil {
			msg = out.Error.Type + ": " + out.Error.Message
		}
		return Advice{}, fmt.Errorf("claude: %d %s", resp.StatusCode, msg)
	}
	used := out.usage(c.cfg.Model)
	if out.StopReason == "max_tokens" {
		return Advice{Usage: used}, errors.New("claude: answer cut off at max_tokens")
	}
	var text strings.Builder
	for _, block := range out.Content {
		if block.Type == "text" {
			text.WriteString(block.Text)
		}
	}
	a, err := parseAdvice(text.String())
	a.Usage = used
	return a, err
}

// usage is the call's usage as a report (the model the API answered with,
// else the one asked for); nil when the answer has none or absurd figures.
func (r claudeResponse) usage(asked string) *events.UsageReport {
	if r.Usage == nil {
		return nil
	}
	u := events.UsageReport{Model: r.Model, InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens,
		CacheReadTokens: r.Usage.CacheReadInputTokens, CacheWriteTokens: r.Usage.CacheCreationInputTokens}
	if u.Model == "" {
		u.Model = asked
	}
	if u.Validate("") != nil {
		return nil
	}
	return &u
}

var (
	markup    = regexp.MustCompile(`<[a-zA-Z/!?][^>]*>`)
	skipStart = regexp.MustCompile(`^\W*SKIP\b[\s:.\-–—*]*`)
)

// parseAdvice reads the model's answer: "SKIP: reason" or an instruction.
func parseAdvice(answer string) (Advice, error) {
	answer = strings.TrimSpace(answer)
	switch {
	case answer == "":
		return Advice{}, errors.New("claude: empty answer")
	case !utf8.ValidString(answer):
		return Advice{}, errors.New("claude: answer is not UTF-8")
	case len(answer) > maxHintLen:
		return Advice{}, fmt.Errorf("claude: answer of %d bytes is too long", len(answer))
	case markup.MatchString(answer):
		return Advice{}, errors.New("claude: answer contains markup")
	}
	if loc := skipStart.FindStringIndex(answer); loc != nil {
		reason := strings.TrimSpace(answer[loc[1]:])
		if reason == "" {
			reason = "The failure looks permanent; a retry would fail the same way."
		}
		return Advice{Skip: true, Reason: reason}, nil
	}
	return Advice{Hint: answer}, nil
}

// clip cuts s to n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// redactKey keeps the API key out of errors (and so out of logs).
func redactKey(err error, key string) error {
	if key == "" || !strings.Contains(err.Error(), key) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), key, "[redacted]"))
}
