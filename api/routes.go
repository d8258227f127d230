package api

import "net/http"

// table is every API route: registered by newEcho and documented by openapi.
func (s *Server) table() []route {
	const w, a = "/api/v1/worker", "/api/v1/admin/workers"
	return []route{
		{http.MethodPost, "/api/v1/auth/login", "Log in; returns a JWT and the user", rolePublic, s.login, loginRequest{}, nil},

		{http.MethodPost, w + "/heartbeat", "Report that this worker is alive", roleWorker, s.heartbeat, heartbeatRequest{}, nil},
		{http.MethodPost, w + "/tasks/claim", "Claim the next task; with wait=<seconds, up to 60>, wait for one (null when none came)", roleWorker, s.claim, nil, []string{"wait"}},
		{http.MethodGet, w + "/tasks", "List this worker's tasks (active; all=true for every status)", roleWorker, s.workerTasks, nil, []string{"all"}},
		{http.MethodGet, w + "/tasks/:id", "Read one of this worker's tasks with its type", roleWorker, s.workerTask, nil, nil},
		{http.MethodPost, w + "/tasks/:id/updates", "Post a progress message", roleWorker, s.postUpdate, updateRequest{}, nil},
		{http.MethodPost, w + "/tasks/:id/result", "Post the structured result", roleWorker, s.postResult, resultRequest{}, nil},
		{http.MethodPut, w + "/tasks/:id/status", "Complete or fail the task", roleWorker, s.setStatus, statusRequest{}, nil},
		{http.MethodPost, w + "/tasks/:id/release", "Give the task back to the pool", roleWorker, s.release, reasonRequest{}, nil},

		{http.MethodPost, a, "Create a worker user", roleAdmin, s.createWorker, createWorkerRequest{}, nil},
		{http.MethodGet, a, "List workers with their activity", roleAdmin, s.listWorkers, nil, nil},
		{http.MethodGet, a + "/capacity", "Fleet capacity: slots used and free", roleAdmin, s.capacity, nil, nil},
		{http.MethodGet, a + "/stats", "Counts per status, queue depth, workers online", roleAdmin, s.stats, nil, nil},
		{http.MethodPost, a + "/task-types", "Create a task type", roleAdmin, s.createTaskType, taskTypeRequest{}, nil},
		{http.MethodGet, a + "/task-types", "List task types (archived=true to include archived)", roleAdmin, s.listTaskTypes, nil, []string{"archived"}},
		{http.MethodGet, a + "/task-types/:id", "Read a task type", roleAdmin, s.getTaskType, nil, nil},
		{http.MethodPut, a + "/task-types/:id", "Replace a task type's definition", roleAdmin, s.updateTaskType, taskTypeRequest{}, nil},
		{http.MethodPost, a + "/task-types/:id/archive", "Archive a task type (no new tasks)", roleAdmin, s.archiveTaskType, nil, nil},
		{http.MethodPost, a + "/tasks", "Create a task", roleAdmin, s.createTask, createTaskRequest{}, nil},
		{http.MethodGet, a + "/tasks", "List tasks, newest first, with the queue depth", roleAdmin, s.listTasks, nil,
			[]string{"status", "task_type_id", "priority", "assigned_to", "unassigned", "retries", "after", "limit"}},
		{http.MethodGet, a + "/tasks/:id", "Read a task with parent, retries, assignments and updates; with at=<RFC 3339>, the task as it was then", roleAdmin, s.getTask, nil, []string{"at"}},
		{http.MethodPut, a + "/tasks/:id", "Edit a pending task", roleAdmin, s.editTask, editTaskRequest{}, nil},
		{http.MethodPost, a + "/tasks/:id/cancel", "Cancel a task", roleAdmin, s.cancelTask, reasonRequest{}, nil},
		{http.MethodPost, a + "/tasks/:id/assign", "Assign a pending task to a worker, with a reason", roleAdmin, s.assignTask, assignRequest{}, nil},
		{http.MethodPost, a + "/tasks/:id/retry", "Retry a failed task now, by hand (also after retries were skipped or exhausted)", roleAdmin, s.retryTask, retryRequest{}, nil},
		{http.MethodGet, a + "/tasks/:id/events", "The task's history: its events with actor, causation and a one-line summary", roleAdmin, s.taskEvents, nil, nil},
		{http.MethodGet, a + "/tasks/:id/chain", "The task's retry lineage, original to latest", roleAdmin, s.taskChain, nil, nil},
		{http.MethodGet, "/api/v1/admin/events", "Page through the event log in consumer order", roleAdmin, s.listEvents, nil, eventQuery},
		{http.MethodGet, streamPath, "Live tail of the event log (Server-Sent Events; id is the position)", roleAdmin, s.streamEvents, nil, append([]string{"token"}, eventQuery...)},
		{http.MethodPost, streamPath + "-token", "A short-lived token that opens the event stream (?token=), for browsers", roleAdmin, s.streamToken, nil, nil},
	}
}
