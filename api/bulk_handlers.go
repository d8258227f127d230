package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// Bulk actions act on every task a list filter matches, not only a page of
// it. Each task gets its own command, exactly as the single-task route
// would run it (its own event and transaction), so replay stays exact. The
// walk goes newest first by keyset, MaxBulkPage ids a read, and one request
// stops after MaxBulkTasks tasks or BulkTimeBudget: the answer says what it
// did and gives a cursor to go on.
const (
	// MaxBulkTasks bounds the tasks one bulk request acts on.
	MaxBulkTasks = 1000
	// MaxBulkCount bounds a dry run's count, so it stays a bounded read.
	MaxBulkCount = 100_000
	// BulkTimeBudget ends a bulk request early, well inside the server's
	// write timeout, with a cursor to continue.
	BulkTimeBudget = 20 * time.Second
	// maxBulkSkips bounds the skipped tasks an answer names.
	maxBulkSkips = 10
)

// TaskFilterParams is the task list's filter: GET /tasks takes it as query
// parameters, POST /tasks/bulk as its body's filter, and both check it here.
type TaskFilterParams struct {
	Status     string `json:"status,omitempty" openapi:"enum=pending|in_progress|completed|failed|cancelled" doc:"only tasks in this status"`
	TaskTypeID string `json:"task_type_id,omitempty" openapi:"format=uuid" doc:"only tasks of this type"`
	Priority   string `json:"priority,omitempty" openapi:"enum=urgent|high|medium|low" doc:"only tasks of this priority"`
	AssignedTo string `json:"assigned_to,omitempty" openapi:"format=uuid" doc:"only tasks assigned to this worker"`
	Unassigned bool   `json:"unassigned,omitempty" doc:"only pending tasks nobody holds: the queue"`
	Retries    bool   `json:"retries,omitempty" doc:"only retry tasks"`
	Stuck      bool   `json:"stuck,omitempty" doc:"only tasks held by (or pre-assigned to) a worker silent past the offline threshold"`
	Q          string `json:"q,omitempty" openapi:"maxLength=200" doc:"only tasks whose title contains this, ignoring case"`
}

// maxSearch bounds a title search.
const maxSearch = 200

// filter checks p; prefix is put before each field it blames ("filter.").
func (p TaskFilterParams) filter(prefix string) (store.TaskFilter, error) {
	f := store.TaskFilter{Unassigned: p.Unassigned, Retries: p.Retries, Stuck: p.Stuck, Search: strings.TrimSpace(p.Q)}
	var err error
	if p.Status != "" {
		if f.Status = events.Status(p.Status); !f.Status.Valid() {
			return f, events.Invalid(prefix+"status", "must be pending, in_progress, completed, failed or cancelled")
		}
	}
	if p.Priority != "" {
		if f.Priority = events.Priority(p.Priority); f.Priority.Rank() < 0 {
			return f, events.Invalid(prefix+"priority", "must be urgent, high, medium or low")
		}
	}
	if p.TaskTypeID != "" {
		if f.TaskTypeID, err = parseUUID(prefix+"task_type_id", p.TaskTypeID); err != nil {
			return f, err
		}
	}
	if p.AssignedTo != "" {
		if f.AssignedTo, err = parseUUID(prefix+"assigned_to", p.AssignedTo); err != nil {
			return f, err
		}
	}
	if events.TooLong(f.Search, maxSearch) {
		return f, events.Invalid(prefix+"q", "is longer than %d characters", maxSearch)
	}
	return f, nil
}

// BulkTasksRequest is POST /tasks/bulk's body.
type BulkTasksRequest struct {
	Action *string           `json:"action" openapi:"required,enum=cancel|retry" doc:"cancel: every matching task that has not ended; retry: every matching failed task without a retry yet"`
	Filter *TaskFilterParams `json:"filter" openapi:"required" doc:"the task list's filter (GET /tasks's query parameters); at least one criterion"`
	Reason string            `json:"reason,omitempty" openapi:"maxLength=10000" doc:"cancel: why, required, recorded on each task.cancelled; retry: an optional hint for the next attempts (up to 1,000 bytes)"`
	DryRun bool              `json:"dry_run,omitempty" doc:"change nothing; answer how many tasks the action applies to now (matching)"`
	After  string            `json:"after,omitempty" doc:"the next_cursor of the previous answer: go on from there"`
	Limit  *int              `json:"limit,omitempty" openapi:"min=1,max=1000" doc:"the most tasks this request acts on (default and most 1,000)"`
}

// BulkSkip is a task a bulk action passed over, with why.
type BulkSkip struct {
	ID      string `json:"id"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// BulkResult is what a bulk action did, or with dry_run would do.
type BulkResult struct {
	Action string `json:"action"`
	DryRun bool   `json:"dry_run"`
	// Matching is, for a dry run, how many tasks the action applies to now
	// (at most MaxBulkCount, then MatchingAtLeast); for a run, how many
	// this request reached (done + skipped).
	Matching        int  `json:"matching"`
	MatchingAtLeast bool `json:"matching_at_least"`
	Done            int  `json:"done"`
	// Skipped counts tasks whose command refused them when their turn
	// came: mostly a race (finished, cancelled or retried meanwhile), or a
	// retry whose unique key another task holds now.
	Skipped int        `json:"skipped"`
	Skips   []BulkSkip `json:"skips" doc:"the first skipped tasks (at most 10) with why"`
	// NextCursor is set when more tasks may match: send it as after.
	NextCursor string `json:"next_cursor,omitempty"`
}

// bulkPlan is a checked bulk request.
type bulkPlan struct {
	action string
	filter store.TaskFilter
	limit  int
	act    func(ctx context.Context, id string) error
}

func (s *Server) planBulk(req BulkTasksRequest, meta events.Meta) (*bulkPlan, error) {
	// action, limit and reason's length: their tags (validateShape).
	noFilter := events.Invalid("filter", "is required and must set at least one criterion (status, task_type_id, priority, assigned_to, unassigned, retries, stuck or q)")
	if req.Filter == nil {
		return nil, noFilter
	}
	f, err := req.Filter.filter("filter.")
	if err != nil {
		return nil, err
	}
	if f == (store.TaskFilter{}) {
		return nil, noFilter
	}
	p := &bulkPlan{action: *req.Action, filter: f, limit: MaxBulkTasks}
	if req.Limit != nil {
		p.limit = *req.Limit
	}
	reason := strings.TrimSpace(req.Reason)
	switch p.action {
	case "cancel":
		if reason == "" && !req.DryRun {
			return nil, events.Invalid("reason", "is required: say why these tasks are cancelled")
		}
		p.filter.Cancellable = true
		p.act = func(ctx context.Context, id string) error {
			_, err := s.CancelTask(ctx, id, reason, meta)
			return err
		}
	case "retry":
		if events.TooLong(reason, maxRetryHint) {
			return nil, events.Invalid("reason", "is longer than %d characters (a retry's hint)", maxRetryHint)
		}
		p.filter.Retryable = true
		p.act = func(ctx context.Context, id string) error {
			_, err := s.RetryTask(ctx, id, reason, meta)
			return err
		}
	default:
		return nil, events.Invalid("action", "must be cancel or retry")
	}
	if req.After != "" {
		if err := store.CheckCursor(req.After); err != nil {
			return nil, err
		}
		p.filter.After = req.After
	}
	return p, nil
}

// BulkTasks cancels or retries the tasks a filter matches, each through
// its own command, or with DryRun counts them. Tasks that no longer
// qualify when their turn comes are skipped and counted; only an error of
// the service itself ends the request.
func (s *Server) BulkTasks(ctx context.Context, req BulkTasksRequest, meta events.Meta) (*BulkResult, error) {
	// The admin UI calls this with a request it built: the same checks.
	if err := validateShape(&req); err != nil {
		return nil, err
	}
	p, err := s.planBulk(req, meta)
	if err != nil {
		return nil, err
	}
	res := &BulkResult{Action: p.action, DryRun: req.DryRun, Skips: []BulkSkip{}}
	if req.DryRun {
		if res.Matching, res.MatchingAtLeast, err = s.db.CountTasks(ctx, p.filter, MaxBulkCount); err != nil {
			return nil, err
		}
		return res, nil
	}
	deadline := s.now().Add(BulkTimeBudget)
	f := p.filter
	for res.Matching < p.limit {
		f.Limit = min(store.MaxBulkPage, p.limit-res.Matching)
		refs, err := s.db.MatchingTasks(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, r := range refs {
			if err := s.bulkOne(ctx, p, r.ID, res); err != nil {
				return nil, err
			}
			f.After = r.Cursor
			if s.now().After(deadline) && res.Matching < p.limit {
				res.NextCursor = f.After
				return res, nil
			}
		}
		if len(refs) < f.Limit {
			return res, nil
		}
	}
	res.NextCursor = f.After
	return res, nil
}

// bulkOne acts on one task and counts the outcome; it fails only on an
// error that is not the task's own (the database, the client gone).
func (s *Server) bulkOne(ctx context.Context, p *bulkPlan, id string, res *BulkResult) error {
	res.Matching++
	err := p.act(ctx, id)
	if err == nil {
		res.Done++
		return nil
	}
	status, body := classify(err)
	if status < 400 || status >= 500 || status == statusClientClosed {
		return err
	}
	res.Skipped++
	if len(res.Skips) < maxBulkSkips {
		res.Skips = append(res.Skips, BulkSkip{ID: id, Code: body.Code, Message: body.Message})
	}
	return nil
}

func (s *Server) bulkTasks(c echo.Context) error {
	var req BulkTasksRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	res, err := s.BulkTasks(c.Request().Context(), req, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, res)
}
