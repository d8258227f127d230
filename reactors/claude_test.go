package reactors_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/reactors"
)

// fakeClaude speaks the Messages API. The failure reason picks the answer:
// "mode=<name>" in the prompt selects one of the modes below.
type fakeClaude struct {
	t    *testing.T
	e    *env
	srv  *httptest.Server
	slow time.Duration

	mu       sync.Mutex
	calls    map[string]int // by mode
	inTx     int            // advisor calls that began or ended while a batch transaction was open (txChecked)
	requests []claudeRequest
}

type claudeRequest struct {
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	System    string `json:"system"`
	Messages  []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

const (
	fakeKey  = "sk-ant-test-key"
	fakeHint = "Use longer delays (3-5 s) between requests and smaller batch sizes."
)

func newFakeClaude(t *testing.T, e *env) *fakeClaude {
	f := &fakeClaude{t: t, e: e, calls: map[string]int{}, slow: 2 * time.Second}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeClaude) serve(w http.ResponseWriter, r *http.Request) {
	var req claudeRequest
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" || r.Header.Get("x-api-key") != fakeKey ||
		r.Header.Get("anthropic-version") != "2023-06-01" || json.Unmarshal(body, &req) != nil || len(req.Messages) != 1 {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad request"}}`)
		return
	}
	prompt := req.Messages[0].Content
	mode := "hint"
	if i := strings.Index(prompt, "mode="); i >= 0 {
		mode = strings.Fields(prompt[i+len("mode="):])[0]
	}
	f.mu.Lock()
	f.calls[mode]++
	f.requests = append(f.requests, req)
	f.mu.Unlock()

	text := func(s, stop string) {
		w.Header().Set("content-type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "msg_01", "type": "message", "role": "assistant", "model": req.Model,
			"content":     []map[string]string{{"type": "text", "text": s}},
			"stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]int{"input_tokens": 100, "output_tokens": 20},
		})
	}
	apiError := func(status int, typ string) {
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":"fake %s"}}`, typ, typ)
	}
	switch mode {
	case "hint":
		text(fakeHint, "end_turn")
	case "skip":
		text("SKIP: No posts found for ticker XYZZ in any subreddit; is this a valid ticker?", "end_turn")
	case "bareskip":
		text("SKIP", "end_turn")
	case "429":
		w.Header().Set("retry-after", "30")
		apiError(http.StatusTooManyRequests, "rate_limit_error")
	case "500":
		apiError(http.StatusInternalServerError, "api_error")
	case "529":
		apiError(529, "overloaded_error")
	case "slow":
		select {
		case <-time.After(f.slow):
		case <-r.Context().Done():
		}
		text(fakeHint, "end_turn")
	case "malformed":
		fmt.Fprint(w, `{"id": "msg_01", "content": [`)
	case "empty":
		text("   ", "end_turn")
	case "long":
		text(strings.Repeat("Retry more carefully. ", 100), "end_turn")
	case "html":
		text("<p>Use a <b>smaller</b> batch.</p>", "end_turn")
	case "cutoff":
		text("Use longer delays between requests and", "max_tokens")
	default:
		apiError(http.StatusBadRequest, "invalid_request_error")
	}
}

func (f *fakeClaude) count(mode string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[mode]
}

// txChecked wraps the advisor so that every call looks, as it begins and
// as it returns, whether a batch transaction of the advised reactor is open:
// then someone holds its checkpoint row. (The other retry reactor's may be;
// it asks nobody.) The look is made in the caller's goroutine, not in the
// fake's handler: under load the handler may run after the client gave up
// (its timeout) and the runner went on to its transaction, which is no call
// made inside one.
func (f *fakeClaude) txChecked(advisor reactors.Advisor) reactors.Advisor {
	return checkedAdvisor{f: f, advisor: advisor}
}

type checkedAdvisor struct {
	f       *fakeClaude
	advisor reactors.Advisor
}

func (c checkedAdvisor) Advise(ctx context.Context, req reactors.AdviceRequest) (reactors.Advice, error) {
	c.f.lookForTx(ctx)
	defer c.f.lookForTx(context.WithoutCancel(ctx))
	return c.advisor.Advise(ctx, req)
}

// lookForTx counts in inTx a lock held on the advised reactor's checkpoint.
// It runs in the runner's goroutines, so it reports with Errorf.
func (f *fakeClaude) lookForTx(ctx context.Context) {
	tx, err := f.e.pool.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, `SELECT 1 FROM reactor_checkpoints WHERE name = 'retry_advice' FOR KEY SHARE NOWAIT`)
		_ = tx.Rollback(context.WithoutCancel(ctx))
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available
		f.mu.Lock()
		f.inTx++
		f.mu.Unlock()
	case err != nil && ctx.Err() == nil:
		f.t.Errorf("look for a batch transaction: %v", err)
	}
}

func TestRetryAdvice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := newFakeClaude(t, e)
	claude, err := reactors.NewClaude(reactors.ClaudeConfig{APIKey: fakeKey, BaseURL: fake.srv.URL,
		Model: "claude-test", Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	e.retryReactor("a", fake.txChecked(claude))
	tt := e.taskType(events.TaskTypeSpec{Name: "crawl", MaxRetries: 3})
	w := e.worker("Advised Worker", 20)

	type result struct {
		mode string
		task *events.Task
	}
	modes := []string{"hint", "skip", "bareskip", "429", "500", "529", "slow", "malformed", "empty", "long", "html", "cutoff"}
	var all []result
	for _, mode := range modes {
		task := e.createAssigned(tt, "Crawl "+mode, "Find posts.", w)
		require.NotNil(t, e.claim(w))
		e.fail(w, task.ID, "Arctic Shift API failed mode="+mode+" after 50 calls")
		all = append(all, result{mode, task})
	}
	for _, r := range all {
		failed := e.decided(r.task.ID)
		evs := e.stream(r.task.ID)
		require.Equal(t, 1, fake.count(r.mode), "one call per failure (%s)", r.mode)
		used := ofType(evs, "task.usage_reported")
		switch r.mode {
		case "429", "500", "529", "malformed", "slow": // no answer, no usage
			require.Empty(t, used, r.mode)
		default: // an answer, usable or not: its tokens were spent
			require.Len(t, used, 1, r.mode)
			p := used[0].Payload.(events.TaskUsageReported)
			require.Equal(t, events.System(events.RetryAdvisorName), used[0].Meta.Actor, r.mode)
			require.Equal(t, events.TaskUsageReported{Model: "claude-test", InputTokens: 100, OutputTokens: 20,
				CostSource: events.CostUnpriced, By: events.UsageByAdvisor, TaskTypeID: tt.ID, RootTaskID: r.task.ID,
				Day: p.Day}, p, r.mode)
		}
		switch r.mode {
		case "skip", "bareskip":
			require.Equal(t, events.RetryOutcomeSkipped, *failed.RetryOutcome, r.mode)
			skipped := ofType(evs, "task.retry_skipped")
			require.Len(t, skipped, 1)
			reason := skipped[0].Payload.(events.TaskRetrySkipped).Reason
			if r.mode == "skip" {
				require.Equal(t, "No posts found for ticker XYZZ in any subreddit; is this a valid ticker?", reason)
			} else {
				require.NotEmpty(t, reason)
			}
			require.Equal(t, r.task.ID, skipped[0].Meta.CorrelationID)
			require.Empty(t, ofType(evs, "task.retried"))
			require.Nil(t, failed.RetryTaskID)
		case "hint":
			retry := e.get(*failed.RetryTaskID)
			require.Equal(t, fakeHint, ofType(evs, "task.retried")[0].Payload.(events.TaskRetried).Hint)
			require.Equal(t, "Find posts.\n\nPREVIOUS ATTEMPT FAILED: Arctic Shift API failed mode=hint after 50 calls\n"+
				"This is retry 1 of 3.\n"+fakeHint, retry.Description)
		default: // anything but a sane answer: the template
			retry := e.get(*failed.RetryTaskID)
			require.Empty(t, ofType(evs, "task.retried")[0].Payload.(events.TaskRetried).Hint, r.mode)
			require.Equal(t, "Find posts.\n\nPREVIOUS ATTEMPT FAILED: Arctic Shift API failed mode="+r.mode+
				" after 50 calls\nThis is retry 1 of 3.", retry.Description, r.mode)
		}
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	require.Zero(t, fake.inTx, "the advisor is never asked while a transaction is open")
	req := fake.requests[0]
	require.Equal(t, "claude-test", req.Model)
	require.Equal(t, 200, req.MaxTokens)
	require.Equal(t, "user", req.Messages[0].Role)
	require.Contains(t, req.Messages[0].Content, "A task failed with this error:\nArctic Shift API failed")
	require.Contains(t, req.Messages[0].Content, "Task type: crawl")
	require.Contains(t, req.Messages[0].Content, "SKIP")
}

// Failures of kind worker_offline and timeout, and failures with no retry
// left, never reach the advisor.
func TestRetryAdviceOnlyForErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fake := newFakeClaude(t, e)
	claude, err := reactors.NewClaude(reactors.ClaudeConfig{APIKey: fakeKey, BaseURL: fake.srv.URL, Timeout: time.Second})
	require.NoError(t, err)
	e.retryReactor("a", claude)
	tt := e.taskType(events.TaskTypeSpec{MaxRetries: 1})
	none := e.taskType(events.TaskTypeSpec{MaxRetries: 0})
	w := e.worker("Worker", 10)

	var ids []string
	for _, kind := range []string{events.FailureWorkerOffline, events.FailureTimeout} {
		task := e.createAssigned(tt, "Task "+kind, "", w)
		require.NotNil(t, e.claim(w))
		_, _, err := e.db.UpdateTask(e.ctx, e.pool, task.ID, system, func(t *events.Task) ([]events.Payload, error) {
			return t.Fail("", kind, "mode=skip", nil)
		})
		require.NoError(t, err)
		ids = append(ids, task.ID)
	}
	last := e.createAssigned(none, "No retries", "", w)
	require.NotNil(t, e.claim(w))
	e.fail(w, last.ID, "mode=skip")

	for _, id := range ids {
		failed := e.decided(id)
		require.Equal(t, events.RetryOutcomeRetried, *failed.RetryOutcome)
		require.Equal(t, "PREVIOUS ATTEMPT FAILED: mode=skip\nThis is retry 1 of 1.", e.get(*failed.RetryTaskID).Description)
	}
	require.Equal(t, events.RetryOutcomeExhausted, *e.decided(last.ID).RetryOutcome)
	require.Zero(t, fake.count("skip"))
}
