package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// Unblocked runs every registered function, in the caller, until it is
// unregistered.
func TestHubUnblocked(t *testing.T) {
	h := NewHub()
	var a, b int
	stopA := h.OnUnblocked(func() { a++ })
	h.OnUnblocked(func() { b++ })
	h.Unblocked()
	require.Equal(t, []int{1, 1}, []int{a, b})
	stopA()
	h.Unblocked()
	require.Equal(t, []int{1, 2}, []int{a, b})
}

// A wake that names event types reaches the subscribers that want one of
// them, and those that want every wake; one that names none reaches all;
// NoEvents reaches only those that want every wake.
func TestHubWakesWhomTheTypesConcern(t *testing.T) {
	h := NewHub()
	all, _ := h.Subscribe()
	anyEvent, _ := h.SubscribeTo(AnyEvent)
	onlyA, _ := h.SubscribeTo(func(t string) bool { return t == "a" })
	notA, _ := h.SubscribeTo(Except("a"))
	woken := func() []bool {
		var got []bool
		for _, ch := range []<-chan struct{}{all, anyEvent, onlyA, notA} {
			select {
			case <-ch:
				got = append(got, true)
			default:
				got = append(got, false)
			}
		}
		return got
	}
	h.Wake("a")
	require.Equal(t, []bool{true, true, true, false}, woken())
	h.Wake("b", "c")
	require.Equal(t, []bool{true, true, false, true}, woken())
	h.Wake()
	require.Equal(t, []bool{true, true, true, true}, woken())
	h.Wake(NoEvents)
	require.Equal(t, []bool{true, false, false, false}, woken())
}

// Every commit names what it wrote: the hot path's batches their one type,
// event writes in a transaction their types at its commit, and the
// transaction itself NoEvents for what else it wrote.
func TestCommitsNameTheirEventTypes(t *testing.T) {
	e := newBatchEnv(t)
	var got [][]string
	e.db.afterCommit = func(types ...string) { got = append(got, types) }
	take := func() [][]string { g := got; got = nil; return g }
	worker := e.user(t, "w", true, 1)
	// A process's first claim runs the limited branch, until it has seen
	// that no limited type exists; this one finds nothing and commits nothing.
	none, err := e.db.Claim(e.ctx, worker, events.Meta{})
	require.NoError(t, err)
	require.Nil(t, none)
	take()

	id := e.task(t, "alone", events.PriorityMedium, "")
	require.Equal(t, [][]string{{"task.created"}}, take())
	runAt := time.Now().Add(time.Hour)
	_, err = e.db.CreateTask(e.ctx, e.db.Pool(), NewTaskParams{TaskTypeID: e.typeID, NewTaskParams: events.NewTaskParams{
		Title: "later", Params: json.RawMessage(`{}`), AvailableAt: &runAt}}, e.admin)
	require.NoError(t, err)
	require.Equal(t, [][]string{{"task.created", TimedCreate}}, take(), "a task that waits for its run_at: the due timer arms for it")

	require.NoError(t, e.db.WithTx(e.ctx, func(tx pgx.Tx) error {
		_, err := e.db.CreateTask(e.ctx, tx, NewTaskParams{TaskTypeID: e.typeID, NewTaskParams: events.NewTaskParams{
			Title: "in a transaction", Params: json.RawMessage(`{}`)}}, e.admin)
		require.Empty(t, got, "nothing is woken before the commit")
		return err
	}))
	require.Equal(t, [][]string{{"task.created"}, {NoEvents}}, take())

	require.NoError(t, e.db.WithTx(e.ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(e.ctx, `SELECT 1`)
		return err
	}))
	require.Equal(t, [][]string{{NoEvents}}, take())

	claimed, err := e.db.Claim(e.ctx, worker, events.Meta{})
	require.NoError(t, err)
	require.Equal(t, id, claimed.ID)
	require.Equal(t, [][]string{{"task.claimed"}}, take())
	_, _, err = e.db.CompleteTask(e.ctx, id, worker, events.Meta{})
	require.NoError(t, err)
	require.Equal(t, [][]string{{"task.completed"}}, take())
}

// While a limited type exists, a claim may fill a rate window, whose end
// only the due timer sees: its wake then names nothing, so every
// subscriber (the due timer, which sleeps through plain claims) looks.
func TestClaimOfALimitedTypeWakesEveryone(t *testing.T) {
	e := newLimitsEnv(t)
	rated := e.limitedType(t, "rated", events.TypeLimits{RateLimit: &events.RateLimit{Count: 1, Per: "10s"}})
	a := e.user(t, "a", true, 5)
	e.taskOf(t, rated, `{}`, "")
	var got [][]string
	e.db.afterCommit = func(types ...string) { got = append(got, types) }
	require.Len(t, e.claim(t, a, 1), 1)
	require.Equal(t, [][]string{nil}, got, "the claim's wake names no type")
	got = nil
	e.taskOf(t, rated, `{}`, "")
	require.Equal(t, [][]string{{"task.created", TimedCreate}}, got, "while a limited type exists, a create may wait for a window's end")
}
