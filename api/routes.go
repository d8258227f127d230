package api

import (
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/api/reference"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/whatif"
)

// table is every API route: registered by newEcho and documented by openapi.
// A new route names its success status and response type, its errors and its
// query parameters' types (see route in server.go); TestOpenAPIDocument fails
// when one is missing, and the API tests validate every answer against them.
func (s *Server) table() []route {
	const w, a = "/api/v1/worker", "/api/v1/admin/workers"
	const (
		bad, notFound, conflict = http.StatusBadRequest, http.StatusNotFound, http.StatusConflict
		created                 = http.StatusCreated
		okay                    = http.StatusOK
	)
	return append([]route{
		{method: http.MethodPost, path: "/api/v1/auth/login", id: "login", summary: "Log in; returns a JWT and the user", role: rolePublic, handler: s.login,
			request: loginRequest{}, status: okay, response: LoginResponse{}, errors: []int{bad, http.StatusUnauthorized, http.StatusTooManyRequests}},
		{method: http.MethodPost, path: "/api/v1/auth/password", id: "changePassword", summary: "Change your own password; returns a new token (every older one stops working)", role: roleUser, handler: s.changePassword,
			request: changePasswordRequest{}, status: okay, response: LoginResponse{}, errors: []int{bad, http.StatusTooManyRequests}},

		{method: http.MethodPost, path: w + "/heartbeat", id: "heartbeat", summary: "Report that this worker is alive", role: roleWorker, handler: s.heartbeat,
			request: heartbeatRequest{}, emptyBody: true, status: okay, response: heartbeatView{}, errors: []int{bad}},
		{method: http.MethodPost, path: w + "/tasks/claim", id: "claimTask", summary: "Claim the next task; with wait=<seconds, up to 60>, wait for one (null when none came)", role: roleWorker, handler: s.claim,
			query:  []param{intParam("wait", 0, int(MaxClaimWait.Seconds()), "seconds to wait for a task when none is claimable now (long poll)")},
			status: okay, response: orNull{store.TaskWithType{}}, errors: []int{bad, http.StatusServiceUnavailable}},
		{method: http.MethodPost, path: w + "/tasks/claims", id: "claimTasks", summary: "Claim up to max tasks (1-100, at most the free slots) in claim order; with wait=<seconds, up to 60>, wait until at least one comes (an empty list when none came)", role: roleWorker, handler: s.claimMany,
			request: claimManyRequest{}, status: okay, response: []store.TaskWithType{}, errors: []int{bad, http.StatusServiceUnavailable}},
		{method: http.MethodPost, path: w + "/tasks/completions", id: "completeTasks", summary: "Complete or fail up to 100 held tasks; each item is answered in order with its own status and error", role: roleWorker, handler: s.finishMany,
			request: finishItems{}, status: okay, response: []FinishResult{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodGet, path: w + "/tasks", id: "listMyTasks", summary: "List this worker's tasks (active; all=true for every status)", role: roleWorker, handler: s.workerTasks,
			query:  []param{boolParam("all", "include finished tasks")},
			status: okay, response: []events.Task{}, errors: []int{bad}},
		{method: http.MethodGet, path: w + "/tasks/:id", id: "getMyTask", summary: "Read one of this worker's tasks with its type", role: roleWorker, handler: s.workerTask,
			status: okay, response: store.TaskWithType{}, errors: []int{bad, notFound}},
		{method: http.MethodPost, path: w + "/tasks/:id/updates", id: "postUpdate", idempotent: true, summary: "Post a progress message", role: roleWorker, handler: s.postUpdate,
			request: updateRequest{}, status: okay, response: events.Task{}, errors: []int{bad, notFound, conflict, http.StatusRequestEntityTooLarge}},
		{method: http.MethodPost, path: w + "/tasks/:id/result", id: "postResult", summary: "Post the structured result", role: roleWorker, handler: s.postResult,
			request: resultRequest{}, status: okay, response: events.Task{}, errors: []int{bad, notFound, conflict, http.StatusRequestEntityTooLarge}},
		{method: http.MethodPut, path: w + "/tasks/:id/status", id: "setTaskStatus", summary: "Complete or fail the task", role: roleWorker, handler: s.setStatus,
			request: statusRequest{}, status: okay, response: events.Task{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: w + "/tasks/:id/usage", id: "reportUsage", summary: "Report LLM usage of this attempt (adds to the task's, its retry chain's, its type's and this worker's totals); cost_usd, when left out, comes from the price table", role: roleWorker, handler: s.reportUsage, tag: "usage",
			request: events.UsageReport{}, status: okay, response: events.Task{}, errors: []int{bad, http.StatusForbidden, notFound, conflict, http.StatusRequestEntityTooLarge}},
		{method: http.MethodPut, path: w + "/tasks/:id/checkpoint", id: "putTaskCheckpoint", summary: "Save the task's checkpoint: a JSON state (at most 64 KiB) that its next attempt receives in the claim answer when the task is retried or released; the latest save wins", role: roleWorker, handler: s.putCheckpoint,
			request: checkpointRequest{}, status: okay, response: store.CheckpointSaved{}, errors: []int{bad, notFound, conflict, http.StatusRequestEntityTooLarge}, bodyLimit: MaxCheckpointBodyBytes},
		{method: http.MethodPost, path: w + "/tasks/:id/release", id: "releaseTask", summary: "Give the task back to the pool", role: roleWorker, handler: s.release,
			request: reasonRequest{}, emptyBody: true, status: okay, response: events.Task{}, errors: []int{bad, notFound, conflict}},

		{method: http.MethodPost, path: w + "/tasks/:id/data", id: "uploadTaskData", summary: "Upload files the task produced: the raw body (with data_type and filename), or multipart/form-data with several files (data_type as a query parameter or a field before them); answers the stored files", role: roleWorker, handler: s.uploadData, tag: "data", rawBody: true,
			query: []param{patternParam("data_type", `^[A-Za-z0-9][A-Za-z0-9_-]*$`, events.MaxDataTypeLen, "the kind of data, e.g. posts: letters, digits, '_' and '-'"),
				patternParam("filename", `^[A-Za-z0-9_][A-Za-z0-9._-]*$`, events.MaxFilenameLen, "the file's name, e.g. nvda.jsonl: letters, digits, '.', '_' and '-' (raw bodies only)")},
			status: created, response: []events.TaskData{}, errors: []int{bad, notFound, conflict, http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable}},
		{method: http.MethodGet, path: w + "/tasks/:id/data", id: "listMyTaskData", summary: "List the data of this worker's task and of its earlier attempts", role: roleWorker, handler: s.listMyTaskData, tag: "data",
			status: okay, response: []events.TaskData{}, errors: []int{bad, notFound}},
		{method: http.MethodGet, path: w + "/tasks/:id/data/:data_id", id: "downloadMyTaskData", summary: "Download a file of this worker's task or of an earlier attempt (Range supported; on S3 a 302 to a presigned URL)", role: roleWorker, handler: s.downloadMyTaskData, tag: "data",
			status: okay, media: mediaDownload, also: []int{http.StatusPartialContent, http.StatusFound}, errors: []int{bad, notFound, http.StatusServiceUnavailable}},

		{method: http.MethodPost, path: a, id: "createWorker", idempotent: true, summary: "Create an account: a worker, an admin too (is_admin), or an admin only (is_worker false)", role: roleAdmin, handler: s.createWorker,
			request: createWorkerRequest{}, status: created, response: events.User{}, errors: []int{bad, conflict}},
		{method: http.MethodGet, path: a, id: "listWorkers", summary: "List workers with their activity, by name, one page at a time; role=admin lists admins, role=any every account", role: roleAdmin, handler: s.listWorkers,
			query: []param{enumParam("role", "which accounts: worker (default), admin or any", "worker", "admin", "any"),
				stringParam("after", "the next_cursor of the previous page"),
				intParam("limit", 1, store.MaxAccountPage, "page size (default 50)")},
			status: okay, response: store.AccountPage{}, errors: []int{bad}},
		{method: http.MethodGet, path: a + "/:id", id: "getWorker", summary: "Read a user (worker or admin): activity, active flag, lockout", role: roleAdmin, handler: s.getWorker,
			status: okay, response: store.WorkerView{}, errors: []int{bad, notFound}},
		{method: http.MethodPut, path: a + "/:id", id: "updateWorker", summary: "Change a user's name, max_concurrent_tasks or roles (a role change revokes its tokens)", role: roleAdmin, handler: s.updateWorker,
			request: updateWorkerRequest{}, status: okay, response: store.WorkerView{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: a + "/:id/deactivate", id: "deactivateWorker", summary: "Deactivate a user: its tokens stop working, the tasks it holds go back to the pool", role: roleAdmin, handler: s.deactivateWorker,
			request: reasonRequest{}, emptyBody: true, status: okay, response: store.WorkerView{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: a + "/:id/reactivate", id: "reactivateWorker", summary: "Let a deactivated user log in again (its old tokens stay revoked)", role: roleAdmin, handler: s.reactivateWorker,
			request: reasonRequest{}, emptyBody: true, status: okay, response: store.WorkerView{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: a + "/:id/password", id: "resetPassword", summary: "Set a user's password (revokes its tokens and ends a lockout)", role: roleAdmin, handler: s.resetPassword,
			request: passwordRequest{}, status: okay, response: store.WorkerView{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodGet, path: a + "/capacity", id: "getCapacity", summary: "Fleet capacity: slots used and free, with one page of the workers by name", role: roleAdmin, handler: s.capacity, tag: "fleet",
			query: []param{stringParam("after", "the next_cursor of the previous page"),
				intParam("limit", 1, store.MaxAccountPage, "workers per page (default 50)")},
			status: okay, response: store.Capacity{}, errors: []int{bad}},
		{method: http.MethodGet, path: a + "/stats", id: "getStats", summary: "Counts per status, queue depth, workers online", role: roleAdmin, handler: s.stats, tag: "fleet",
			status: okay, response: store.Stats{}, errors: []int{}},
		{method: http.MethodGet, path: a + "/digest", id: "previewDigest", summary: "Today's daily digest, as the Telegram chat gets it (so far, before its time)", role: roleAdmin, handler: s.previewDigest, tag: "fleet",
			status: okay, response: digestPreview{}, errors: []int{}},

		{method: http.MethodPost, path: a + "/task-types", id: "createTaskType", idempotent: true, summary: "Create a task type", role: roleAdmin, handler: s.createTaskType,
			request: taskTypeRequest{}, status: created, response: events.TaskType{}, errors: []int{bad, conflict}},
		{method: http.MethodGet, path: a + "/task-types", id: "listTaskTypes", summary: "List task types (archived=true to include archived)", role: roleAdmin, handler: s.listTaskTypes,
			query:  []param{boolParam("archived", "include archived types")},
			status: okay, response: []events.TaskType{}, errors: []int{bad}},
		{method: http.MethodGet, path: a + "/task-types/:id", id: "getTaskType", summary: "Read a task type", role: roleAdmin, handler: s.getTaskType,
			status: okay, response: events.TaskType{}, errors: []int{bad, notFound}},
		{method: http.MethodPut, path: a + "/task-types/:id", id: "updateTaskType", summary: "Replace a task type's definition", role: roleAdmin, handler: s.updateTaskType,
			request: taskTypeRequest{}, status: okay, response: events.TaskType{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: a + "/task-types/:id/archive", id: "archiveTaskType", summary: "Archive a task type (no new tasks)", role: roleAdmin, handler: s.archiveTaskType,
			status: okay, response: events.TaskType{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodGet, path: a + "/task-types/:id/usage", id: "getTaskTypeUsage", summary: "A task type's limits in use now: tasks in progress, claims in the rate window, keys at their limit", role: roleAdmin, handler: s.taskTypeUsage,
			status: okay, response: store.TypeUsage{}, errors: []int{bad, notFound}},
		{method: http.MethodPost, path: a + "/task-types/:id/pause", id: "pauseTaskType", summary: "Pause a task type: claims skip its tasks, which stay pending and visible", role: roleAdmin, handler: s.pauseTaskType,
			request: pauseRequest{}, status: okay, response: events.TaskType{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: a + "/task-types/:id/resume", id: "resumeTaskType", summary: "Resume a paused task type: waiting workers get its tasks at once", role: roleAdmin, handler: s.resumeTaskType,
			request: reasonRequest{}, emptyBody: true, status: okay, response: events.TaskType{}, errors: []int{bad, notFound, conflict}},

		{method: http.MethodPost, path: a + "/tasks", id: "createTask", idempotent: true, summary: "Create a task; with a unique_key another live task holds, 409 duplicate_task (its id in error.details.existing_task_id), or with on_duplicate=existing 200 and that task", role: roleAdmin, handler: s.createTask,
			request: createTaskRequest{}, status: created, also: []int{okay}, response: TaskAnswer{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: a + "/tasks/batch", id: "createTasks", summary: "Create up to 1,000 tasks in one transaction; each item is checked on its own (schema, unique key) and answered in order with its own status and the task's id or its error", role: roleAdmin, handler: s.createTasks,
			request: createTasksRequest{}, status: okay, response: CreatedBatch{}, errors: []int{bad}, idempotent: true, bodyLimit: MaxBatchBodyBytes},
		{method: http.MethodPost, path: a + "/workflows", id: "createWorkflow", summary: "Create a workflow: its whole graph of tasks at once, or nothing (a cycle, an unknown ref or an invalid item is a 400 naming the item); tasks with dependencies start blocked", role: roleAdmin, handler: s.createWorkflow,
			request: createWorkflowRequest{}, status: created, response: store.WorkflowView{}, errors: []int{bad, conflict, statusUnknownRef}, bodyLimit: MaxBatchBodyBytes},
		{method: http.MethodGet, path: a + "/workflows", id: "listWorkflows", summary: "List workflows, newest first, with their status, progress and duration", role: roleAdmin, handler: s.listWorkflows,
			query:  []param{stringParam("after", "the next_cursor of the previous page"), intParam("limit", 1, 200, "page size (default 50)")},
			status: okay, response: store.WorkflowPage{}, errors: []int{bad}},
		{method: http.MethodGet, path: a + "/workflows/:id", id: "getWorkflow", summary: "Read a workflow: status, progress, duration and each task (the latest of its retry chain) with its dependencies", role: roleAdmin, handler: s.getWorkflow,
			status: okay, response: store.WorkflowView{}, errors: []int{bad, notFound}},
		{method: http.MethodPost, path: a + "/workflows/:id/cancel", id: "cancelWorkflow", summary: "Cancel a workflow and every task of it that may still run", role: roleAdmin, handler: s.cancelWorkflow,
			request: reasonRequest{}, emptyBody: true, status: okay, response: store.WorkflowView{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodGet, path: a + "/tasks", id: "listTasks", summary: "List tasks, newest first, with the queue depth", role: roleAdmin, handler: s.listTasks,
			query: []param{
				enumParam("status", "only tasks in this status", events.StatusBlocked, events.StatusPending, events.StatusInProgress, events.StatusCompleted, events.StatusFailed, events.StatusCancelled),
				uuidParam("task_type_id", "only tasks of this type"),
				enumParam("priority", "only tasks of this priority", events.PriorityUrgent, events.PriorityHigh, events.PriorityMedium, events.PriorityLow),
				uuidParam("assigned_to", "only tasks assigned to this worker"),
				boolParam("unassigned", "only pending tasks nobody holds: the queue"),
				boolParam("retries", "only retry tasks"),
				boolParam("stuck", "only tasks held by (or pre-assigned to) a worker silent past the offline threshold"),
				stringParam("q", "only tasks whose title contains this, ignoring case (up to 200 characters)"),
				stringParam("after", "the next_cursor of the previous page"),
				intParam("limit", 1, 200, "page size (default 50)"),
			},
			status: okay, response: TaskListPage{}, errors: []int{bad}},
		{method: http.MethodPost, path: a + "/tasks/bulk", id: "bulkTasks", summary: "Cancel or retry every task the list's filter matches (dry_run counts them first): one command and event per task, newest first, at most 1,000 tasks or 20 s a request; tasks that stopped qualifying are skipped and counted, and next_cursor says more may remain", role: roleAdmin, handler: s.bulkTasks,
			request: BulkTasksRequest{}, status: okay, response: BulkResult{}, errors: []int{bad}},
		{method: http.MethodGet, path: a + "/tasks/:id", id: "getTask", summary: "Read a task with parent, retries, assignments and updates; with at=<RFC 3339>, the task as it was then", role: roleAdmin, handler: s.getTask,
			query:  []param{timeParam("at", "answer with the task as it was at this time (a bare task, without what surrounds it)")},
			status: okay, response: oneOf{store.TaskDetail{}, events.Task{}}, errors: []int{bad, notFound}},
		{method: http.MethodPut, path: a + "/tasks/:id", id: "editTask", summary: "Edit a pending task", role: roleAdmin, handler: s.editTask,
			request: editTaskRequest{}, status: okay, response: events.Task{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: a + "/tasks/:id/cancel", id: "cancelTask", summary: "Cancel a task", role: roleAdmin, handler: s.cancelTask,
			request: reasonRequest{}, emptyBody: true, status: okay, response: events.Task{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: a + "/tasks/:id/release", id: "releaseBlockedTask", summary: "Release a blocked task from its dependencies: it becomes pending (claimable) whatever they say", role: roleAdmin, handler: s.releaseTask,
			request: reasonRequest{}, emptyBody: true, status: okay, response: events.Task{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodPost, path: a + "/tasks/:id/assign", id: "assignTask", summary: "Assign a pending task to a worker, with a reason", role: roleAdmin, handler: s.assignTask,
			request: assignRequest{}, status: okay, response: AssignAnswer{}, errors: []int{bad, notFound, conflict, statusUnknownRef}},
		{method: http.MethodGet, path: a + "/tasks/:id/assignments", id: "listTaskAssignments", summary: "A task's assignment history, oldest first: admin assignments, claims and releases, with who and why", role: roleAdmin, handler: s.taskAssignments,
			status: okay, response: []store.Assignment{}, errors: []int{bad, notFound}},
		{method: http.MethodPost, path: a + "/tasks/:id/retry", id: "retryTask", idempotent: true, summary: "Retry a failed task now, by hand (also after retries were skipped or exhausted)", role: roleAdmin, handler: s.retryTask,
			request: retryRequest{}, emptyBody: true, status: created, response: events.Task{}, errors: []int{bad, notFound, conflict}},
		{method: http.MethodGet, path: a + "/tasks/:id/events", id: "listTaskEvents", summary: "The task's history: its events with actor, causation and a one-line summary", role: roleAdmin, handler: s.taskEvents,
			status: okay, response: []EventView{}, errors: []int{bad, notFound}},
		{method: http.MethodGet, path: a + "/tasks/:id/usage", id: "getTaskLLMUsage", summary: "A task's LLM usage and its retry chain's (counters read by key)", role: roleAdmin, handler: s.taskLLMUsage, tag: "usage",
			status: okay, response: store.TaskUsage{}, errors: []int{bad, notFound}},
		{method: http.MethodGet, path: "/api/v1/admin/llm-usage", id: "getLLMUsageToday", summary: "Today's LLM usage per task type (the team's day, DIGEST_TZ), against each type's daily budgets", role: roleAdmin, handler: s.llmUsageToday, tag: "usage",
			status: okay, response: []store.TypeDayUsage{}, errors: []int{}},
		{method: http.MethodGet, path: a + "/tasks/:id/chain", id: "getTaskChain", summary: "The task's retry lineage, original to latest", role: roleAdmin, handler: s.taskChain,
			status: okay, response: store.Chain{}, errors: []int{bad, notFound}},

		{method: http.MethodGet, path: a + "/tasks/:id/data", id: "listTaskData", summary: "List the files workers uploaded for a task", role: roleAdmin, handler: s.listTaskData, tag: "data",
			status: okay, response: []events.TaskData{}, errors: []int{bad, notFound}},
		{method: http.MethodGet, path: dataDownloadPath, id: "downloadTaskData", summary: "Download one file of a task's data (Range supported; on S3 a 302 to a presigned URL)", role: roleAdmin, handler: s.downloadTaskData, tag: "data",
			status: okay, media: mediaDownload, also: []int{http.StatusPartialContent, http.StatusFound}, errors: []int{bad, notFound, http.StatusServiceUnavailable}},
		{method: http.MethodGet, path: "/api/v1/admin/events", id: "listEvents", summary: "Page through the event log in consumer order", role: roleAdmin, handler: s.listEvents,
			query: append(eventQuery(), intParam("limit", 1, maxEventLimit, "page size (default 100)")), status: okay, response: EventPage{}, errors: []int{bad}},
		{method: http.MethodGet, path: streamPath, id: "streamEvents", summary: "Live tail of the event log (Server-Sent Events; id is the position)", role: roleAdmin, handler: s.streamEvents,
			query:  append([]param{stringParam("token", "a stream token (createStreamToken) instead of the Authorization header, for browsers")}, eventQuery()...),
			status: okay, media: mediaEventStream, errors: []int{bad, http.StatusServiceUnavailable}},
		{method: http.MethodPost, path: streamPath + "-token", id: "createStreamToken", summary: "A short-lived token that opens the event stream (?token=), for browsers", role: roleAdmin, handler: s.streamToken,
			request: streamTokenRequest{}, emptyBody: true, status: okay, response: StreamToken{}, errors: []int{bad}},

		{method: http.MethodGet, path: "/api/v1/admin/replay/what-if", id: "getWhatIfReplay", summary: "Re-run a changed retry and offline policy over the recorded events of a window, in memory, writing nothing: which retry chains would have been retried, skipped or failed by the stuck detector, and their time to a final outcome; 429 while another runs on this instance, 413 naming since when the window needs more than a minute (use taskctl replay --what-if) or holds more than 200,000 retry chains open at once (choose a shorter since)", role: roleAdmin, handler: s.whatIf,
			query: whatIfQuery(), status: okay, response: whatif.Report{}, errors: []int{bad, http.StatusTooManyRequests, http.StatusRequestEntityTooLarge}},

		{method: http.MethodGet, path: "/healthz", id: "getHealth", summary: "Liveness: the process answers", role: rolePublic, handler: s.healthz, tag: "operations",
			status: okay, response: map[string]string{}, errors: []int{}},
		{method: http.MethodGet, path: "/readyz", id: "getReadiness", summary: "Readiness: the database and the listener are up (each one's state in data)", role: rolePublic, handler: s.readyz, tag: "operations",
			status: okay, response: map[string]string{}, errors: []int{http.StatusServiceUnavailable}},
		{method: http.MethodGet, path: "/metrics", id: "getMetrics", summary: "Prometheus metrics", role: rolePublic, handler: s.metrics.handler(), tag: "operations",
			status: okay, media: mediaText, errors: []int{}},
		{method: http.MethodGet, path: "/api/v1/openapi.json", id: "getOpenAPI", summary: "This document", role: rolePublic, handler: s.openapi, tag: "operations",
			status: okay, media: "application/json", errors: []int{}},
		{method: http.MethodGet, path: "/api/docs", id: "getAPIReference", summary: "This API's reference page (Redoc, served from here: no CDN)", role: rolePublic, handler: echo.WrapHandler(reference.Page("/api/v1/openapi.json")), tag: "operations",
			status: okay, media: mediaHTML, errors: []int{}},
		{method: http.MethodGet, path: reference.ScriptPath, id: "getAPIReferenceScript", summary: "The reference page's script (Redoc " + reference.RedocVersion + ", MIT)", role: rolePublic, handler: echo.WrapHandler(reference.Script()), tag: "operations",
			query:  []param{stringParam("v", "the Redoc version; the page adds it so that a new one is not read from a cache")},
			status: okay, media: "text/javascript", errors: []int{}},
	}, slices.Concat(s.scheduleRoutes(), s.telegramRoutes(), s.freshnessRoutes())...)
}

// eventQuery are the filters of the events API and the stream.
func eventQuery() []param {
	return []param{
		stringParam("after", "a position (an event's position or the page's next): start after it"),
		{name: "type", doc: "only events of these types (repeat the parameter, or separate with commas)",
			schema: map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": events.Types()}}},
		uuidParam("stream_id", "only the events of this stream (a task, task type or user)"),
		uuidParam("worker_id", "only the events of this worker's tasks and of the worker itself"),
	}
}
