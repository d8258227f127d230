package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

type heartbeatRequest struct {
	Status        string          `json:"status,omitempty" openapi:"enum=idle|working|offline"`
	CurrentTaskID *string         `json:"current_task_id,omitempty" openapi:"format=uuid"`
	Metadata      json.RawMessage `json:"metadata,omitempty" doc:"a JSON object of at most 16 KiB, shown to admins"`
}

// heartbeatView is data of POST /worker/heartbeat.
type heartbeatView struct {
	WorkerID   string    `json:"worker_id"`
	Online     bool      `json:"online"`
	ServerTime time.Time `json:"server_time"`
	// InProgress counts the tasks in progress under this worker as the
	// service sees them. More than the worker runs means it holds some it
	// believes finished or never received (a completion lost in a failover
	// to a lagging standby, a lost claim answer): it should list its tasks
	// and give those back.
	InProgress int `json:"in_progress"`
}

const maxMetadataBytes = 16 << 10

func (s *Server) heartbeat(c echo.Context) error {
	var req heartbeatRequest
	if err := decode(c, &req, true); err != nil {
		return err
	}
	switch req.Status {
	case "", "idle", "working", "offline":
	default:
		return events.Invalid("status", "must be idle, working or offline")
	}
	current, err := optionalUUID("current_task_id", req.CurrentTaskID)
	if err != nil {
		return err
	}
	meta := bytes.TrimSpace(req.Metadata)
	if len(meta) > 0 && !bytes.Equal(meta, []byte("null")) && meta[0] != '{' {
		return events.Invalid("metadata", "must be a JSON object")
	}
	if len(meta) > maxMetadataBytes {
		return events.Invalid("metadata", "is larger than %d bytes", maxMetadataBytes)
	}
	p := store.HeartbeatParams{Status: req.Status, Metadata: meta}
	if current != "" {
		p.CurrentTaskID = &current
	}
	u, err := s.db.Heartbeat(c.Request().Context(), claimsOf(c).Subject, p, actor(c, events.ActorWorker))
	if err != nil {
		return err
	}
	held, err := s.db.InProgressUnder(c.Request().Context(), u.ID)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, heartbeatView{WorkerID: u.ID, Online: u.Online, ServerTime: s.now().UTC(), InProgress: held})
}

func (s *Server) claim(c echo.Context) error {
	wait, err := waitParam(c)
	if err != nil {
		return err
	}
	tasks, err := s.claimWaiting(c, wait, 1)
	if err != nil {
		return err
	}
	s.countClaims(c, tasks)
	if len(tasks) == 0 {
		return ok(c, http.StatusOK, nil)
	}
	return ok(c, http.StatusOK, tasks[0])
}

// countClaims counts a claim call's outcome and events, and gives each
// retry its previous attempts and each task that may resume its checkpoint.
func (s *Server) countClaims(c echo.Context, tasks []*store.TaskWithType) {
	if len(tasks) == 0 {
		s.metrics.claims.WithLabelValues("empty").Inc()
		return
	}
	s.metrics.claims.WithLabelValues("claimed").Inc()
	for _, t := range tasks {
		s.attachPreviousAttempts(c, t)
		s.attachCheckpoint(c, t)
	}
}

func (s *Server) workerTasks(c echo.Context) error {
	all, err := boolQuery(c, "all")
	if err != nil {
		return err
	}
	tasks, err := s.db.WorkerTasks(c.Request().Context(), claimsOf(c).Subject, all)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, tasks)
}

func (s *Server) workerTask(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	t, err := s.db.GetTaskWithType(c.Request().Context(), id)
	if err != nil {
		return err
	}
	if !t.HeldBy(claimsOf(c).Subject) {
		return events.ErrForbidden
	}
	s.attachPreviousAttempts(c, t)
	s.attachCheckpoint(c, t)
	return ok(c, http.StatusOK, t)
}

// workerCommand runs decide on the worker's task :id and answers with the task.
func (s *Server) workerCommand(c echo.Context, decide func(t *events.Task, worker string) ([]events.Payload, error)) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	worker := claimsOf(c).Subject
	t, _, err := s.db.UpdateTask(c.Request().Context(), s.db.Pool(), id, actor(c, events.ActorWorker),
		func(t *events.Task) ([]events.Payload, error) { return decide(t, worker) })
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, t)
}

type updateRequest struct {
	Message *string `json:"message" openapi:"required,nonblank,maxLength=20000"`
}

func (s *Server) postUpdate(c echo.Context) error {
	var req updateRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	if req.Message == nil {
		return events.Invalid("message", "is required")
	}
	updateID := uuid.Must(uuid.NewV7()).String()
	return s.workerCommand(c, func(t *events.Task, worker string) ([]events.Payload, error) {
		return t.PostUpdate(updateID, worker, *req.Message, true)
	})
}

type resultRequest struct {
	Result json.RawMessage `json:"result" openapi:"required,anyNotNull" doc:"the result: any JSON value but null"`
}

func (s *Server) postResult(c echo.Context) error {
	var req resultRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	return s.workerCommand(c, func(t *events.Task, worker string) ([]events.Payload, error) {
		ps, err := t.PostResult(worker, req.Result)
		if err == nil {
			err = t.Room("result")
		}
		return ps, err
	})
}

type statusRequest struct {
	Status *string `json:"status" openapi:"required,enum=completed|failed"`
	Reason string  `json:"reason,omitempty"`
	// Kind says why a failure happened: error (default) or timeout (the
	// worker killed the command at its time limit). worker_offline is the
	// stuck detector's to say, never a worker's.
	Kind string `json:"kind,omitempty" openapi:"enum=error|timeout"`
	// Usage is the attempt's LLM usage, reported before the task finishes.
	Usage *events.UsageReport `json:"usage,omitempty" doc:"the attempt's LLM usage, reported before the task finishes"`
}

func (s *Server) setStatus(c echo.Context) error {
	var req statusRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	if req.Status == nil {
		return events.Invalid("status", "is required: completed or failed")
	}
	if req.Usage != nil {
		if err := req.Usage.Validate("usage."); err != nil {
			return err
		}
	}
	switch events.Status(*req.Status) {
	case events.StatusCompleted:
		if req.Kind != "" {
			return events.Invalid("kind", "only applies to status failed")
		}
		if req.Usage != nil {
			return s.finishWithUsage(c, store.Finish{Status: events.StatusCompleted, Usage: req.Usage})
		}
		return s.complete(c)
	case events.StatusFailed:
		kind := events.FailureError
		switch req.Kind {
		case "", events.FailureError:
		case events.FailureTimeout:
			kind = events.FailureTimeout
		default:
			return events.Invalid("kind", "must be error or timeout")
		}
		if req.Usage != nil {
			return s.finishWithUsage(c, store.Finish{Status: events.StatusFailed, Kind: kind, Reason: req.Reason, Usage: req.Usage})
		}
		return s.workerCommand(c, func(t *events.Task, worker string) ([]events.Payload, error) {
			return t.Fail(worker, kind, req.Reason, nil)
		})
	}
	return events.Invalid("status", "must be completed or failed")
}

// finishWithUsage reports the usage and finishes the task in one command.
func (s *Server) finishWithUsage(c echo.Context, f store.Finish) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	f.ID = id
	t, _, err := s.db.FinishTask(c.Request().Context(), claimsOf(c).Subject, f, actor(c, events.ActorWorker))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, t)
}

// reportUsage adds one attempt's LLM usage to the task the worker holds.
func (s *Server) reportUsage(c echo.Context) error {
	var u events.UsageReport
	if err := decode(c, &u, false); err != nil {
		return err
	}
	if err := u.Validate(""); err != nil {
		return err
	}
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	t, _, err := s.db.ReportUsage(c.Request().Context(), id, claimsOf(c).Subject, u, actor(c, events.ActorWorker))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, t)
}

// taskLLMUsage answers a task's LLM usage and its retry chain's.
func (s *Server) taskLLMUsage(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	u, err := s.db.TaskUsage(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, u)
}

// llmUsageToday answers today's LLM usage per task type, against budgets.
func (s *Server) llmUsageToday(c echo.Context) error {
	u, err := s.db.TypesUsageToday(c.Request().Context())
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, u)
}

// complete takes the store's fused fast path (one round trip).
func (s *Server) complete(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	t, _, err := s.db.CompleteTask(c.Request().Context(), id, claimsOf(c).Subject, actor(c, events.ActorWorker))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, t)
}

type reasonRequest struct {
	Reason string `json:"reason,omitempty" openapi:"maxLength=10000"`
}

func (s *Server) release(c echo.Context) error {
	var req reasonRequest
	if err := decode(c, &req, true); err != nil {
		return err
	}
	return s.workerCommand(c, func(t *events.Task, worker string) ([]events.Payload, error) {
		return t.Release(worker, req.Reason)
	})
}

func boolQuery(c echo.Context, name string) (bool, error) {
	switch c.QueryParam(name) {
	case "":
		return false, nil
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, events.Invalid(name, "must be true or false")
}
