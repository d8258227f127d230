package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// MaxBatchBodyBytes bounds the body of a batch of creations: a thousand
// tasks of a kilobyte each and room to spare, where other bodies get
// MaxBodyBytes.
const MaxBatchBodyBytes = 16 << 20

// createTasksRequest is POST /admin/workers/tasks/batch.
type createTasksRequest struct {
	Tasks []createTaskRequest `json:"tasks" openapi:"required,minItems=1,maxItems=1000" doc:"1 to 1000 tasks, each as POST /tasks takes it; each is checked on its own"`
}

// CreatedItem is one item's answer, in request order: the HTTP status the
// single creation would have answered (201, or 200 for a duplicate answered
// with the task that holds its key), the task's id, or the error.
type CreatedItem struct {
	Status  int        `json:"status"`
	Success bool       `json:"success"`
	ID      string     `json:"id,omitempty"`
	Error   *ErrorBody `json:"error,omitempty"`
}

// CreatedBatch is the answer to a batch of creations.
type CreatedBatch struct {
	Created int           `json:"created" doc:"how many tasks were created"`
	Failed  int           `json:"failed" doc:"how many items were refused"`
	Items   []CreatedItem `json:"items"`
}

func (s *Server) createTasks(c echo.Context) error {
	items, err := decodeBatchItems(c)
	if err != nil {
		return err
	}
	out, err := s.CreateTasks(c.Request().Context(), items, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	for i, it := range out.Items {
		if it.Status >= 500 {
			s.log.Error().Str("request_id", requestID(c)).Int("item", i).Str("error", it.Error.Message).Msg("batch item failed")
		}
	}
	return ok(c, http.StatusOK, out)
}

// batchItem is one element of tasks: the request, or why it could not be
// read.
type batchItem struct {
	req CreateTaskRequest
	err error
}

// decodeBatchItems reads {"tasks": [...]}: a malformed body, or a list
// that is empty or longer than store.MaxCreateTasks, refuses the whole
// request; an item that is not a valid request object fails alone.
func decodeBatchItems(c echo.Context) ([]batchItem, error) {
	raw, err := readBody(c) // bounded by MaxBatchBodyBytes (the route's bodyLimit)
	if err != nil {
		return nil, err
	}
	var body struct {
		Tasks *[]json.RawMessage `json:"tasks"`
	}
	if err := decodeStrict(raw, &body); err != nil {
		return nil, err
	}
	if body.Tasks == nil {
		return nil, events.Invalid("tasks", "is required: a list of 1 to %d tasks", store.MaxCreateTasks)
	}
	elems := *body.Tasks
	if len(elems) == 0 {
		return nil, events.Invalid("tasks", "is an empty list; send 1 to %d tasks", store.MaxCreateTasks)
	}
	if len(elems) > store.MaxCreateTasks {
		return nil, events.Invalid("tasks", "has %d items; send at most %d (split the list)", len(elems), store.MaxCreateTasks)
	}
	items := make([]batchItem, len(elems))
	for i, el := range elems {
		items[i].err = decodeRaw(el, &items[i].req, false)
	}
	return items, nil
}

// CreateTasks creates a batch of tasks, each checked on its own as
// CreateTask checks one (an item that could not be read carries its error)
// and answered in order; the good ones are created in one transaction.
func (s *Server) CreateTasks(ctx context.Context, items []batchItem, meta events.Meta) (*CreatedBatch, error) {
	out := &CreatedBatch{Items: make([]CreatedItem, len(items))}
	var params []store.NewTaskParams
	var at []int // the item of each params
	types := typeCache{}
	for i, it := range items {
		if it.err != nil {
			out.Items[i] = failedItem(i, it.err)
			continue
		}
		p, err := s.taskParams(ctx, it.req, meta, types)
		if err != nil {
			out.Items[i] = failedItem(i, err)
			continue
		}
		params = append(params, p)
		at = append(at, i)
	}
	if len(params) > 0 {
		created, err := s.db.CreateTasks(ctx, s.db.Pool(), params, meta)
		if err != nil {
			return nil, err
		}
		for j, cr := range created {
			i := at[j]
			var dup *events.DuplicateTaskError
			switch {
			case errors.As(cr.Err, &dup) && items[i].req.OnDuplicate == onDuplicateExisting:
				out.Items[i] = CreatedItem{Status: http.StatusOK, Success: true, ID: dup.TaskID}
			case cr.Err != nil:
				out.Items[i] = failedItem(i, cr.Err)
			default:
				out.Items[i] = CreatedItem{Status: http.StatusCreated, Success: true, ID: cr.Task.ID}
			}
		}
	}
	for _, it := range out.Items {
		switch it.Status {
		case http.StatusCreated:
			out.Created++
		case http.StatusOK:
		default:
			out.Failed++
		}
	}
	return out, nil
}

// failedItem is item i's error answer, its field named from the request's
// root: tasks[i].title.
func failedItem(i int, err error) CreatedItem {
	status, body := classify(err)
	prefix := fmt.Sprintf("tasks[%d]", i)
	switch {
	case body.Field == "" || body.Field == "body":
		body.Field = prefix
	case !strings.HasPrefix(body.Field, prefix):
		body.Field = prefix + "." + body.Field
	}
	return CreatedItem{Status: status, Error: &body}
}
