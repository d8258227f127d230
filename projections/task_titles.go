package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// TitleColumns are task_titles' columns, in TitleRow order.
var TitleColumns = []string{"id", "title"}

// TitleRow is the task_titles row of a folded task.
func TitleRow(t *events.Task) []any {
	return []any{t.ID, t.Title}
}

const upsertTitle = `INSERT INTO task_titles (id, title) VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE SET title = excluded.title`

// queueTaskTitle writes the title of a new task or of one whose title
// changed, and nothing otherwise: the title search's trigram index lives on
// task_titles, not worker_tasks, so that status changes (a new worker_tasks
// row version each) never insert into it (migration 014).
func queueTaskTitle(b *pgx.Batch, before, t *events.Task) {
	if before != nil && before.Title == t.Title {
		return
	}
	b.Queue(upsertTitle, TitleRow(t)...)
}
