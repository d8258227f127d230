package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/storetest"
)

// keyed sends a request with an Idempotency-Key and returns the status,
// the body and whether the answer says it is a replay.
func (b *bundle) keyed(t *testing.T, token, method, path, key, body string) (int, string, bool) {
	t.Helper()
	req, err := http.NewRequestWithContext(b.ctx, method, b.url+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := b.http.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(raw), resp.Header.Get("Idempotent-Replayed") == "true"
}

// A creating request sent again with its Idempotency-Key and the same body
// gets the first answer again and creates nothing; with another body it
// gets 422 and changes nothing. Each route that creates something takes a
// key; keys are per caller and last a day.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tt := b.newType(t, "report")
	w := b.newWorker(t, "Una", 1)
	admin := b.admin.Token()
	const A = "/api/v1/admin/workers"
	taskBody := `{"title":"once","task_type_id":"` + tt.ID + `","params":{"days":1}}`

	status, first, replayed := b.keyed(t, admin, "POST", A+"/tasks", "k-1", taskBody)
	require.Equal(t, http.StatusCreated, status, first)
	require.False(t, replayed)
	before := b.snapshot(t)
	status, again, replayed := b.keyed(t, admin, "POST", A+"/tasks", "k-1", taskBody)
	require.Equal(t, http.StatusCreated, status)
	require.True(t, replayed)
	require.Equal(t, first, again, "the first answer, byte for byte")
	require.Equal(t, before, b.snapshot(t), "no new event, no new row")

	status, body, _ := b.keyed(t, admin, "POST", A+"/tasks", "k-1", strings.Replace(taskBody, "once", "twice", 1))
	require.Equal(t, http.StatusUnprocessableEntity, status)
	requireError(t, body, "idempotency_key_reused", "Idempotency-Key")
	status, body, _ = b.keyed(t, admin, "POST", A+"/task-types", "k-1", `{"name":"other"}`)
	require.Equal(t, http.StatusUnprocessableEntity, status, "a key is the caller's, across routes")
	requireError(t, body, "idempotency_key_reused", "Idempotency-Key")
	require.Equal(t, before, b.snapshot(t))

	// A refused request keeps nothing: the key is still free.
	status, body, _ = b.keyed(t, admin, "POST", A+"/tasks", "k-2", `{"title":"","task_type_id":"`+tt.ID+`"}`)
	require.Equal(t, http.StatusBadRequest, status, body)
	status, _, replayed = b.keyed(t, admin, "POST", A+"/tasks", "k-2", taskBody)
	require.Equal(t, http.StatusCreated, status)
	require.False(t, replayed)

	// Another caller's key is another key.
	status, _, replayed = b.keyed(t, w.Token(), "POST", "/api/v1/worker/tasks/00000000-0000-0000-0000-000000000000/updates", "k-1", `{"message":"hi"}`)
	require.Equal(t, http.StatusNotFound, status)
	require.False(t, replayed)

	// Every creating route: the second call answers the first answer.
	var created struct {
		Data struct{ ID string } `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(first), &created))
	got, err := w.Claim(b.ctx)
	require.NoError(t, err)
	require.Equal(t, created.Data.ID, got.ID)
	for _, r := range []struct{ token, path, body string }{
		{admin, A + "/task-types", `{"name":"keyed_type"}`},
		{admin, A, `{"email":"keyed@example.com","password":"long-enough","full_name":"Keyed"}`},
		{admin, "/api/v1/admin/schedules", `{"task":{"task_type_id":"` + tt.ID + `","title":"t","params":{"days":1}},"interval":{"every":1,"unit":"hours"}}`},
		{w.Token(), "/api/v1/worker/tasks/" + got.ID + "/updates", `{"message":"halfway"}`},
	} {
		key := uuid.NewString()
		status, one, _ := b.keyed(t, r.token, "POST", r.path, key, r.body)
		require.Less(t, status, 300, one)
		mid := b.snapshot(t)
		status2, two, replayed := b.keyed(t, r.token, "POST", r.path, key, r.body)
		require.Equal(t, status, status2, r.path)
		require.Equal(t, one, two, r.path)
		require.True(t, replayed, r.path)
		require.Equal(t, mid, b.snapshot(t), r.path)
	}
	updates, err := b.admin.Task(b.ctx, got.ID)
	require.NoError(t, err)
	require.Len(t, updates.Updates, 1, "one update however often it was sent")

	// Bad keys are 400s naming the header.
	for _, bad := range []string{strings.Repeat("k", 256), "has space", "tab\there"} {
		status, body, _ := b.keyed(t, admin, "POST", A+"/tasks", bad, taskBody)
		require.Equal(t, http.StatusBadRequest, status, bad)
		requireError(t, body, "validation_failed", "Idempotency-Key")
	}
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM worker_tasks`))

	// A day later the key is new; the prune deletes what expired.
	kept := b.count(t, `SELECT count(*) FROM idempotency_keys`)
	b.clock.Advance(store24h + time.Minute)
	status, _, replayed = b.keyed(t, admin, "POST", A+"/tasks", "k-1", taskBody)
	require.Equal(t, http.StatusCreated, status)
	require.False(t, replayed)
	n, err := b.db.PruneIdempotencyKeys(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, kept-1, n, "all but k-1, which was just written again")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM idempotency_keys`))
}

const store24h = 24 * time.Hour

func requireError(t *testing.T, body, code, field string) {
	t.Helper()
	var env struct {
		Error client.Error `json:"error"`
	}
	require.NoError(t, json.NewDecoder(bytes.NewReader([]byte(body))).Decode(&env), body)
	require.Equal(t, code, env.Error.Code, body)
	require.Equal(t, field, env.Error.Field, body)
}

func (b *bundle) count(t *testing.T, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, sql).Scan(&n))
	return n
}

// The client sends the key a context carries.
func TestClientSendsTheIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tt := b.newType(t, "report")
	ctx := client.WithIdempotencyKey(b.ctx, "client-key")
	nt := client.NewTask{Title: "via client", TaskTypeID: tt.ID, Params: json.RawMessage(`{"days":1}`)}
	one, err := b.admin.CreateTask(ctx, nt)
	require.NoError(t, err)
	two, err := b.admin.CreateTask(ctx, nt)
	require.NoError(t, err)
	require.Equal(t, one.ID, two.ID)
	page, err := b.admin.Tasks(b.ctx, client.TaskQuery{})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 1)
	require.Equal(t, events.StatusPending, page.Tasks[0].Status)
}

// A keyed request holds one pool connection for its transaction: the
// store's reads inside it join that transaction (store.Conn). Before, a
// schedule's creation read its task type on a second connection, and twice
// as many concurrent keyed requests as the pool has connections held every
// connection, each waiting for one more: every instance hung.
func TestKeyedRequestsDoNotStarveThePool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tt := b.newType(t, "report")
	admin := b.admin.Token()
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	n := 3 * storetest.PoolMaxConns
	paths := []struct{ path, body string }{
		{"/api/v1/admin/schedules", `{"task":{"task_type_id":"` + tt.ID + `","title":"t","params":{"days":1}},"interval":{"every":1,"unit":"hours"}}`},
		{"/api/v1/admin/workers/tasks", `{"title":"t","task_type_id":"` + tt.ID + `","params":{"days":1}}`},
		{"/api/v1/admin/workers/tasks", `{"title":"t","task_type_id":"` + tt.ID + `","params":{"days":1},"unique_key":"` + uuid.NewString() + `"}`},
	}
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := paths[i%len(paths)]
			body := strings.Replace(r.body, `"unique_key":"`, `"unique_key":"`+strconv.Itoa(i), 1)
			req, err := http.NewRequestWithContext(ctx, "POST", b.url+r.path, strings.NewReader(body))
			if err != nil {
				statuses <- 0
				return
			}
			req.Header.Set("Authorization", "Bearer "+admin)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", uuid.NewString())
			resp, err := b.http.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(statuses)
	created := 0
	for s := range statuses {
		if s == http.StatusCreated {
			created++
		}
	}
	require.Equal(t, n, created, "every keyed creation answered 201 within two minutes")
	require.Equal(t, n/len(paths), b.count(t, `SELECT count(*) FROM schedules`))
	require.Equal(t, n/len(paths), b.count(t, `SELECT count(*) FROM worker_tasks WHERE unique_key IS NOT NULL`))
}
