package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// createWorkflowRequest is POST /admin/workers/workflows.
type createWorkflowRequest struct {
	Name  string                `json:"name" openapi:"required,nonblank,maxLength=200"`
	Tasks []workflowTaskRequest `json:"tasks" openapi:"required,minItems=1,maxItems=1000" doc:"1 to 1000 tasks; each depends on others by ref"`
}

// workflowTaskRequest is one task of a new workflow.
type workflowTaskRequest struct {
	Ref                 string          `json:"ref" openapi:"required,maxLength=100" doc:"the task's name in the workflow, unique there"`
	Title               string          `json:"title" openapi:"required,nonblank,maxLength=500"`
	Description         string          `json:"description,omitempty" openapi:"maxLength=100000"`
	TaskTypeID          string          `json:"task_type_id" openapi:"required,format=uuid"`
	Params              json.RawMessage `json:"params,omitempty" doc:"a JSON object that satisfies the type's param_schema"`
	Priority            events.Priority `json:"priority,omitempty" doc:"default medium"`
	DependsOn           []string        `json:"depends_on,omitempty" openapi:"maxItems=100" doc:"refs of tasks of this workflow that must complete first"`
	OnDependencyFailure string          `json:"on_dependency_failure,omitempty" openapi:"enum=cancel|wait" doc:"cancel (the default) or wait, as on POST /tasks"`
}

func (s *Server) createWorkflow(c echo.Context) error {
	var req createWorkflowRequest
	if err := decode(c, &req, false); err != nil {
		return err
	}
	v, err := s.CreateWorkflow(c.Request().Context(), req, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusCreated, v)
}

// CreateWorkflow checks each item as a task creation (its type, its params
// against the type's schema) and creates the workflow.
func (s *Server) CreateWorkflow(ctx context.Context, req createWorkflowRequest, meta events.Meta) (*store.WorkflowView, error) {
	if len(req.Tasks) > events.MaxWorkflowTasks {
		return nil, events.Invalid("tasks", "has %d tasks; at most %d", len(req.Tasks), events.MaxWorkflowTasks)
	}
	types := typeCache{}
	tasks := make([]store.WorkflowTask, len(req.Tasks))
	for i, it := range req.Tasks {
		p, err := s.taskParams(ctx, createTaskRequest{Title: it.Title, Description: it.Description, TaskTypeID: it.TaskTypeID,
			Params: it.Params, Priority: it.Priority}, meta, types)
		if err != nil {
			return nil, underItem(i, err)
		}
		p.OnDependencyFailure = it.OnDependencyFailure
		tasks[i] = store.WorkflowTask{Ref: it.Ref, DependsOn: it.DependsOn, Task: p}
	}
	return s.db.CreateWorkflow(ctx, req.Name, tasks, meta)
}

// underItem puts an item's error under tasks[i].
func underItem(i int, err error) error { return events.Under("tasks["+strconv.Itoa(i)+"]", err) }

func (s *Server) listWorkflows(c echo.Context) error {
	limit, err := intQueryParam(c, "limit", 1, 200, 0)
	if err != nil {
		return err
	}
	page, err := s.db.ListWorkflows(c.Request().Context(), c.QueryParam("after"), limit)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, page)
}

func (s *Server) getWorkflow(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	v, err := s.db.GetWorkflow(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, v)
}

func (s *Server) cancelWorkflow(c echo.Context) error {
	var req reasonRequest
	if err := decode(c, &req, true); err != nil {
		return err
	}
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	v, err := s.db.CancelWorkflow(c.Request().Context(), id, req.Reason, actor(c, events.ActorAdmin))
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, v)
}
