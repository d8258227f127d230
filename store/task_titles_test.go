package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// The title search reads task_titles (migration 014): an edit of the title
// changes what it finds, and a status change writes nothing there, so it
// never pays for the trigram index.
func TestTitleSearchFollowsEditsAndIgnoresStatusChanges(t *testing.T) {
	e := newBatchEnv(t)
	w := e.user(t, "w", true, 2)
	report := e.task(t, "Weekly report", events.PriorityMedium, "")
	crawl := e.task(t, "Crawl NVDA", events.PriorityLow, "")
	search := func(term string) []string {
		t.Helper()
		page, err := e.db.ListTasks(e.ctx, TaskFilter{Search: term})
		require.NoError(t, err)
		var ids []string
		for _, tk := range page.Tasks {
			ids = append(ids, tk.ID)
		}
		return ids
	}
	edit := func(id string, ed events.TaskEdit) {
		t.Helper()
		_, _, err := e.db.UpdateTask(e.ctx, e.db.pool, id, e.admin, func(tk *events.Task) ([]events.Payload, error) {
			return tk.Edit(ed)
		})
		require.NoError(t, err)
	}
	// rowVersions is each title row's id, title and the transactions that
	// wrote (xmin) and locked (xmax) it: a write or a lock changes them.
	rowVersions := func() []string {
		t.Helper()
		rows, err := e.db.pool.Query(e.ctx, `SELECT id || ' ' || title || ' ' || xmin || ' ' || xmax FROM task_titles ORDER BY id`)
		require.NoError(t, err)
		var out []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out = append(out, s)
		}
		require.NoError(t, rows.Err())
		return out
	}

	require.Equal(t, []string{report}, search("REPORT"))
	require.Equal(t, []string{crawl, report}, search("R"), "newest first")

	title := "Monthly invoice"
	edit(report, events.TaskEdit{Title: &title})
	require.Empty(t, search("report"))
	require.Equal(t, []string{report}, search("invoice"))

	// An edit that keeps the title, claims, completions and failures write
	// nothing there.
	before := rowVersions()
	require.Len(t, before, 2)
	high := events.PriorityHigh
	edit(report, events.TaskEdit{Priority: &high})
	meta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: w}}
	claimed, err := e.db.ClaimMany(e.ctx, w, 2, meta)
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	_, _, err = e.db.CompleteTask(e.ctx, report, w, meta)
	require.NoError(t, err)
	_, _, err = e.db.UpdateTask(e.ctx, e.db.pool, crawl, meta, func(tk *events.Task) ([]events.Payload, error) {
		return tk.Fail(w, events.FailureError, "not found", nil)
	})
	require.NoError(t, err)
	require.Equal(t, before, rowVersions())
	e.requireRowIsFold(t, report)
	require.Equal(t, []string{report}, search("invoice"), "finished tasks are still found")
}

// A term with a rare word asks the index for that word and checks the
// whole term on what it finds: the titles with the rare word alone, or
// with the words apart, are not found; case still does not matter.
func TestTitleSearchByRareWordChecksTheWholeTerm(t *testing.T) {
	e := newBatchEnv(t)
	for _, title := range []string{"Synthetic task 1", "Synthetic task 2"} {
		e.task(t, title, events.PriorityMedium, "")
	}
	want := e.task(t, "Synthetic TASK 12345", events.PriorityMedium, "")
	e.task(t, "Synthetic 12345", events.PriorityMedium, "")
	e.task(t, "task, 12345", events.PriorityMedium, "")
	e.task(t, "Synthetic task 1234", events.PriorityMedium, "")
	e.db.titles.Store(&titleSample{read: e.db.Now(), titles: []string{"synthetic task 1", "synthetic task 2", "synthetic task 3"}})

	s := e.db.titles.Load()
	require.Equal(t, []string{"12345"}, s.rareWords("task 12345"))
	require.Empty(t, s.rareWords("synthetic task"), "common words")
	require.Empty(t, s.rareWords("12345"), "one word: the index reads it anyway")
	require.Empty(t, s.rareWords("task 1"), "a word too short for a trigram")

	sql, _, err := e.db.listTasksSQL(TaskFilter{Search: "task 12345", Limit: 50})
	require.NoError(t, err)
	require.Contains(t, sql, "(title || '') ILIKE")
	page, err := e.db.ListTasks(e.ctx, TaskFilter{Search: "task 12345"})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 1)
	require.Equal(t, want, page.Tasks[0].ID)
	n, _, err := e.db.CountTasks(e.ctx, TaskFilter{Search: "task 12345"}, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
