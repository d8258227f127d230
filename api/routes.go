package api

import "net/http"

// table is every API route: registered by newEcho and documented by openapi.
func (s *Server) table() []route {
	const w, a = "/api/v1/worker", "/api/v1/admin/workers"
	return []route{
		{method: http.MethodPost, path: "/api/v1/auth/login", id: "login", summary: "Log in; returns a JWT and the user", role: rolePublic, handler: s.login, request: loginRequest{}},
		{method: http.MethodPost, path: w + "/heartbeat", id: "heartbeat", summary: "Report that this worker is alive", role: roleWorker, handler: s.heartbeat, request: heartbeatRequest{}},
		{method: http.MethodPost, path: w + "/tasks/claim", id: "claimTask", summary: "Claim the next task; with wait=<seconds, up to 60>, wait for one (null when none came)", role: roleWorker, handler: s.claim, query: []string{"wait"}},
		{method: http.MethodPost, path: w + "/tasks/claims", id: "claimTasks", summary: "Claim up to max tasks (1-100, at most the free slots) in claim order; with wait=<seconds, up to 60>, wait until at least one comes (an empty list when none came)", role: roleWorker, handler: s.claimMany, request: claimManyRequest{}},
		{method: http.MethodPost, path: w + "/tasks/completions", id: "completeTasks", summary: "Complete or fail up to 100 held tasks; each item is answered in order with its own status and error", role: roleWorker, handler: s.finishMany, request: []finishItem{}},
		{method: http.MethodGet, path: w + "/tasks", id: "listMyTasks", summary: "List this worker's tasks (active; all=true for every status)", role: roleWorker, handler: s.workerTasks, query: []string{"all"}},
		{method: http.MethodGet, path: w + "/tasks/:id", id: "getMyTask", summary: "Read one of this worker's tasks with its type", role: roleWorker, handler: s.workerTask},
		{method: http.MethodPost, path: w + "/tasks/:id/updates", id: "postUpdate", summary: "Post a progress message", role: roleWorker, handler: s.postUpdate, request: updateRequest{}},
		{method: http.MethodPost, path: w + "/tasks/:id/result", id: "postResult", summary: "Post the structured result", role: roleWorker, handler: s.postResult, request: resultRequest{}},
		{method: http.MethodPut, path: w + "/tasks/:id/status", id: "setTaskStatus", summary: "Complete or fail the task", role: roleWorker, handler: s.setStatus, request: statusRequest{}},
		{method: http.MethodPost, path: w + "/tasks/:id/release", id: "releaseTask", summary: "Give the task back to the pool", role: roleWorker, handler: s.release, request: reasonRequest{}},
		{method: http.MethodPost, path: a, id: "createWorker", summary: "Create a worker user", role: roleAdmin, handler: s.createWorker, request: createWorkerRequest{}},
		{method: http.MethodGet, path: a, id: "listWorkers", summary: "List workers with their activity", role: roleAdmin, handler: s.listWorkers},
		{method: http.MethodGet, path: a + "/capacity", id: "getCapacity", summary: "Fleet capacity: slots used and free", role: roleAdmin, handler: s.capacity},
		{method: http.MethodGet, path: a + "/stats", id: "getStats", summary: "Counts per status, queue depth, workers online", role: roleAdmin, handler: s.stats},
		{method: http.MethodPost, path: a + "/task-types", id: "createTaskType", summary: "Create a task type", role: roleAdmin, handler: s.createTaskType, request: taskTypeRequest{}},
		{method: http.MethodGet, path: a + "/task-types", id: "listTaskTypes", summary: "List task types (archived=true to include archived)", role: roleAdmin, handler: s.listTaskTypes, query: []string{"archived"}},
		{method: http.MethodGet, path: a + "/task-types/:id", id: "getTaskType", summary: "Read a task type", role: roleAdmin, handler: s.getTaskType},
		{method: http.MethodPut, path: a + "/task-types/:id", id: "updateTaskType", summary: "Replace a task type's definition", role: roleAdmin, handler: s.updateTaskType, request: taskTypeRequest{}},
		{method: http.MethodPost, path: a + "/task-types/:id/archive", id: "archiveTaskType", summary: "Archive a task type (no new tasks)", role: roleAdmin, handler: s.archiveTaskType},
		{method: http.MethodPost, path: a + "/tasks", id: "createTask", summary: "Create a task", role: roleAdmin, handler: s.createTask, request: createTaskRequest{}},
		{method: http.MethodGet, path: a + "/tasks", id: "listTasks", summary: "List tasks, newest first, with the queue depth", role: roleAdmin, handler: s.listTasks, query: []string{"status", "task_type_id", "priority", "assigned_to", "unassigned", "retries", "after", "limit"}},
		{method: http.MethodGet, path: a + "/tasks/:id", id: "getTask", summary: "Read a task with parent, retries, assignments and updates; with at=<RFC 3339>, the task as it was then", role: roleAdmin, handler: s.getTask, query: []string{"at"}},
		{method: http.MethodPut, path: a + "/tasks/:id", id: "editTask", summary: "Edit a pending task", role: roleAdmin, handler: s.editTask, request: editTaskRequest{}},
		{method: http.MethodPost, path: a + "/tasks/:id/cancel", id: "cancelTask", summary: "Cancel a task", role: roleAdmin, handler: s.cancelTask, request: reasonRequest{}},
		{method: http.MethodPost, path: a + "/tasks/:id/assign", id: "assignTask", summary: "Assign a pending task to a worker, with a reason", role: roleAdmin, handler: s.assignTask, request: assignRequest{}},
		{method: http.MethodPost, path: a + "/tasks/:id/retry", id: "retryTask", summary: "Retry a failed task now, by hand (also after retries were skipped or exhausted)", role: roleAdmin, handler: s.retryTask, request: retryRequest{}},
		{method: http.MethodGet, path: a + "/tasks/:id/events", id: "listTaskEvents", summary: "The task's history: its events with actor, causation and a one-line summary", role: roleAdmin, handler: s.taskEvents},
		{method: http.MethodGet, path: a + "/tasks/:id/chain", id: "getTaskChain", summary: "The task's retry lineage, original to latest", role: roleAdmin, handler: s.taskChain},
		{method: http.MethodGet, path: "/api/v1/admin/events", id: "listEvents", summary: "Page through the event log in consumer order", role: roleAdmin, handler: s.listEvents, query: eventQuery},
		{method: http.MethodGet, path: streamPath, id: "streamEvents", summary: "Live tail of the event log (Server-Sent Events; id is the position)", role: roleAdmin, handler: s.streamEvents, query: append([]string{"token"}, eventQuery...)},
		{method: http.MethodPost, path: streamPath + "-token", id: "createStreamToken", summary: "A short-lived token that opens the event stream (?token=), for browsers", role: roleAdmin, handler: s.streamToken},
	}
}
