package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// The batched lane (ADR 016): a worker claims many tasks in one request and
// reports many finished ones in one request. Each task gets exactly the
// events and rows of the single calls.

type claimManyRequest struct {
	// Max is how many tasks to claim at most (1 to 100); the worker's free
	// slots bound it too.
	Max *int `json:"max" openapi:"required,min=1,max=100"`
	// Wait is how many seconds (0 to 60) to hold the request until at least
	// one task is claimable.
	Wait *int `json:"wait,omitempty" openapi:"min=0,max=60"`
}

func (s *Server) claimMany(c echo.Context) error {
	var req claimManyRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	// max and wait are required and bounded by their tags (decode).
	var wait time.Duration
	if req.Wait != nil {
		wait = time.Duration(*req.Wait) * time.Second
	}
	tasks, err := s.claimWaiting(c, wait, *req.Max)
	if err != nil {
		return err
	}
	s.countClaims(c, tasks)
	if tasks == nil {
		tasks = []*store.TaskWithType{}
	}
	return ok(c, http.StatusOK, tasks)
}

// finishItem is one element of POST /worker/tasks/completions.
type finishItem struct {
	ID     *string             `json:"id" openapi:"required,format=uuid"`
	Status *string             `json:"status" openapi:"required,enum=completed|failed"`
	Result json.RawMessage     `json:"result,omitempty" openapi:"any" doc:"a result to post before completing"`
	Reason string              `json:"reason,omitempty" openapi:"maxLength=10000"`
	Kind   string              `json:"kind,omitempty" openapi:"enum=error|timeout"`
	Usage  *events.UsageReport `json:"usage,omitempty" doc:"the attempt's LLM usage, reported before the task finishes"`
}

// FinishResult is one item's answer, in request order: its HTTP status as
// the single call would have answered, and the error when it failed. The
// task itself is not echoed back: a worker is done with it, and encoding
// and decoding a hundred tasks cost more than the completions (ADR 016).
type FinishResult struct {
	ID      string     `json:"id"`
	Status  int        `json:"status"`
	Success bool       `json:"success"`
	Error   *ErrorBody `json:"error,omitempty"`
}

// maxFinishItems bounds one completions request, like a claim-many.
const maxFinishItems = store.MaxClaimMany

// finishItems is the completions body, as the document describes it.
type finishItems []finishItem

func (finishItems) itemBounds() (int, int) { return 1, maxFinishItems }

// An item names a task once: JSON Schema's uniqueItems compares whole
// items, so the document says it with x-unique-by (ADR 029).
func (finishItems) uniqueBy() string { return "id" }

func (s *Server) finishMany(c echo.Context) error {
	items, err := decodeFinishItems(c)
	if err != nil {
		return err
	}
	outs, err := s.db.FinishTasks(c.Request().Context(), claimsOf(c).Subject, items, actor(c, events.ActorWorker))
	var ie *store.ItemError
	if errors.As(err, &ie) {
		status, body := classify(ie.Err)
		body.Field = itemField(ie.Index, "id")
		body.Message = fmt.Sprintf("item %d: %s", ie.Index, body.Message)
		return &httpError{status: status, body: body}
	}
	if err != nil {
		return err
	}
	results := make([]FinishResult, len(outs))
	for i, o := range outs {
		r := FinishResult{ID: items[i].ID, Status: http.StatusOK, Success: o.Err == nil}
		if o.Err != nil {
			status, body := classify(o.Err)
			if status >= 500 {
				s.log.Error().Err(o.Err).Str("request_id", requestID(c)).Str("task_id", items[i].ID).Msg("finish item failed")
			}
			r.Status, r.Error = status, &body
		}
		results[i] = r
	}
	return ok(c, http.StatusOK, results)
}

// itemField names a field of the i-th element of a JSON array body.
func itemField(i int, field string) string { return fmt.Sprintf("[%d].%s", i, field) }

// decodeFinishItems reads the body, a JSON array of finishItem, strictly:
// any malformed item refuses the whole request with a 400 naming it.
func decodeFinishItems(c echo.Context) ([]store.Finish, error) {
	raw, err := readBody(c)
	if err != nil {
		return nil, err
	}
	if len(raw) == 0 || raw[0] != '[' {
		return nil, events.Invalid("body", "must be a JSON array of {id, status, result?, reason?, kind?}")
	}
	if err := checkDepth(raw, 1+envelopeOf(reflect.TypeFor[finishItem]()), ""); err != nil {
		return nil, err
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, jsonError(err)
	}
	if len(elems) == 0 {
		return nil, events.Invalid("body", "is an empty list; send 1 to %d items", maxFinishItems)
	}
	if len(elems) > maxFinishItems {
		return nil, events.Invalid("body", "has %d items; send at most %d", len(elems), maxFinishItems)
	}
	items := make([]store.Finish, len(elems))
	seen := make(map[string]int, len(elems))
	for i, el := range elems {
		it, err := finishFromJSON(el)
		if err != nil {
			var ve *events.ValidationError
			if errors.As(err, &ve) {
				field := ve.Field
				if field == "" || field == "body" {
					field = fmt.Sprintf("[%d]", i)
				} else {
					field = itemField(i, field)
				}
				return nil, &events.ValidationError{Field: field, Message: ve.Message}
			}
			return nil, err
		}
		if j, dup := seen[it.ID]; dup {
			return nil, events.Invalid(itemField(i, "id"), "item %d repeats the id of item %d (%s)", i, j, it.ID)
		}
		seen[it.ID] = i
		items[i] = it
	}
	return items, nil
}

// finishFromJSON decodes and checks one item as the single routes would
// (PUT .../status, POST .../result).
func finishFromJSON(raw json.RawMessage) (store.Finish, error) {
	var it finishItem
	if err := decodeJSON(bytes.NewReader(raw), &it, false); err != nil {
		return store.Finish{}, err
	}
	// The tags checked id, status, kind and reason (decode): what is left
	// is the rule across fields and the id's canonical form.
	id, err := parseUUID("id", *it.ID)
	if err != nil {
		return store.Finish{}, err
	}
	f := store.Finish{ID: id, Status: events.Status(*it.Status), Reason: it.Reason}
	if it.Usage != nil {
		if err := it.Usage.Validate("usage."); err != nil {
			return store.Finish{}, err
		}
		f.Usage = it.Usage
	}
	if r := bytes.TrimSpace(it.Result); len(r) > 0 && !bytes.Equal(r, []byte("null")) {
		f.Result = r
	}
	switch f.Status {
	case events.StatusCompleted:
		if it.Kind != "" {
			return store.Finish{}, events.Invalid("kind", "only applies to status failed")
		}
	case events.StatusFailed:
		f.Kind = it.Kind
	default:
		return store.Finish{}, events.Invalid("status", "must be completed or failed")
	}
	return f, nil
}
