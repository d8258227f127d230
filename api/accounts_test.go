package api_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/replay"
)

// run starts the server's background work (the live tail and the users'
// auth cache) for the test's life.
func (b *bundle) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = b.srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (b *bundle) requireReplayClean(t *testing.T) {
	t.Helper()
	rep, err := replay.Verify(b.ctx, b.pool, replay.VerifyConfig{})
	require.NoError(t, err)
	require.True(t, rep.Clean(), "replay --verify found differences: %+v", rep.Differences)
}

// counter reads one unlabelled series from /metrics.
func (b *bundle) counter(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := b.http.Get(b.url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, found := strings.CutPrefix(line, name+" "); found {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return 0
}

func requireStatus(t *testing.T, err error, status int, code string) {
	t.Helper()
	require.Error(t, err)
	var ae *client.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, status, ae.Status, "%v", err)
	if code != "" {
		require.Equal(t, code, ae.Code, "%v", err)
	}
}

func eventTypes(t *testing.T, b *bundle, streamID string) []string {
	t.Helper()
	evs, err := b.db.Stream(b.ctx, b.pool, streamID)
	require.NoError(t, err)
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// TestAccounts drives every account route with and without the auth cache
// running: the answers must be the same.
func TestAccounts(t *testing.T) {
	t.Parallel()
	for _, cached := range []bool{false, true} {
		t.Run(map[bool]string{false: "uncached", true: "cached"}[cached], func(t *testing.T) {
			t.Parallel()
			b := setupHub(t)
			if cached {
				b.run(t)
			}
			testAccounts(t, b, cached)
		})
	}
}

func testAccounts(t *testing.T, b *bundle, cached bool) {
	ctx := b.ctx
	tt := b.newType(t, "report")
	w := b.newWorker(t, "Wanda", 3)

	// With the cache running, requests do not read the user each time.
	reads := b.counter(t, "taskservice_auth_user_reads_total")
	for range 20 {
		_, err := w.MyTasks(ctx, false)
		require.NoError(t, err)
	}
	if extra := b.counter(t, "taskservice_auth_user_reads_total") - reads; cached {
		// Not exactly one: until the follower has started (slow under load) each lookup reads.
		require.LessOrEqual(t, extra, 5.0, "cached: a few reads for 20 requests, not one each")
	} else {
		require.Equal(t, 20.0, extra, "uncached: one read per request")
	}

	// Read and edit.
	got, err := b.admin.Worker(ctx, w.ID)
	require.NoError(t, err)
	require.True(t, got.Active)
	require.Equal(t, "Wanda", got.FullName)
	name, limit := "Wanda Maximoff", 5
	got, err = b.admin.UpdateWorker(ctx, w.ID, client.WorkerEdit{FullName: &name, MaxConcurrentTasks: &limit})
	require.NoError(t, err)
	require.Equal(t, name, got.FullName)
	require.Equal(t, 5, got.MaxConcurrentTasks)
	_, err = w.MyTasks(ctx, false)
	require.NoError(t, err, "a name change does not revoke tokens")

	// A role change revokes the worker's token.
	yes := true
	_, err = b.admin.UpdateWorker(ctx, w.ID, client.WorkerEdit{IsAdmin: &yes})
	require.NoError(t, err)
	_, err = w.MyTasks(ctx, false)
	requireStatus(t, err, http.StatusUnauthorized, "unauthenticated")
	_, err = w.Login(ctx, w.Email, workerPass)
	require.NoError(t, err)
	_, err = w.Workers(ctx)
	require.NoError(t, err, "the new token carries the admin role")

	// Deactivation releases what the worker holds, with the reason.
	held := b.newTask(t, tt, "held", events.PriorityHigh, "")
	claimed, err := w.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, held.ID, claimed.ID)
	assigned := b.newTask(t, tt, "assigned", events.PriorityLow, w.ID)
	got, err = b.admin.DeactivateWorker(ctx, w.ID, "laptop stolen")
	require.NoError(t, err)
	require.False(t, got.Active)
	for _, id := range []string{held.ID, assigned.ID} {
		task := b.requireProjectionIsFold(t, id)
		require.Equal(t, events.StatusPending, task.Status)
		require.Nil(t, task.AssignedTo)
		_, evs := b.fold(t, id)
		last := evs[len(evs)-1]
		require.Equal(t, "task.released", last.Type)
		require.Contains(t, string(last.Data), "worker deactivated: laptop stolen")
	}
	_, err = w.MyTasks(ctx, false)
	requireStatus(t, err, http.StatusUnauthorized, "unauthenticated")
	_, err = w.Login(ctx, w.Email, workerPass)
	requireStatus(t, err, http.StatusUnauthorized, "unauthenticated")
	_, err = b.admin.DeactivateWorker(ctx, w.ID, "")
	requireStatus(t, err, http.StatusConflict, "invalid_transition")
	_, err = b.admin.AssignTask(ctx, held.ID, w.ID, "")
	requireStatus(t, err, http.StatusBadRequest, "validation_failed")

	// Reactivation: the old token stays dead, a new login works.
	old := w.Token()
	got, err = b.admin.ReactivateWorker(ctx, w.ID, "found it")
	require.NoError(t, err)
	require.True(t, got.Active)
	w.SetToken(old)
	_, err = w.MyTasks(ctx, false)
	requireStatus(t, err, http.StatusUnauthorized, "unauthenticated")
	_, err = w.Login(ctx, w.Email, workerPass)
	require.NoError(t, err)

	// An admin's reset revokes; the user's own change returns a new token.
	_, err = b.admin.ResetPassword(ctx, w.ID, "short")
	requireStatus(t, err, http.StatusBadRequest, "validation_failed")
	_, err = b.admin.ResetPassword(ctx, w.ID, "reset-password-1")
	require.NoError(t, err)
	_, err = w.MyTasks(ctx, false)
	requireStatus(t, err, http.StatusUnauthorized, "unauthenticated")
	_, err = w.Login(ctx, w.Email, workerPass)
	requireStatus(t, err, http.StatusUnauthorized, "unauthenticated")
	_, err = w.Login(ctx, w.Email, "reset-password-1")
	require.NoError(t, err)
	before := w.Token()
	_, err = w.ChangePassword(ctx, "wrong-current", "my-own-password")
	requireStatus(t, err, http.StatusForbidden, "forbidden")
	_, err = w.ChangePassword(ctx, "reset-password-1", "my-own-password")
	require.NoError(t, err)
	_, err = w.MyTasks(ctx, false)
	require.NoError(t, err, "the token from the change works")
	w.SetToken(before)
	_, err = w.MyTasks(ctx, false)
	requireStatus(t, err, http.StatusUnauthorized, "unauthenticated")

	// An admin cannot lock itself out.
	_, err = b.admin.DeactivateWorker(ctx, b.adminID, "")
	requireStatus(t, err, http.StatusConflict, "invalid_transition")
	no := false
	_, err = b.admin.UpdateWorker(ctx, b.adminID, client.WorkerEdit{IsAdmin: &no})
	requireStatus(t, err, http.StatusConflict, "conflict") // an admin-only account would be neither: its state refuses

	require.Equal(t, []string{"user.registered", "user.updated", "user.updated", "user.deactivated",
		"user.reactivated", "user.password_changed", "user.password_changed"}, eventTypes(t, b, w.ID))
	b.requireReplayClean(t)
}

// TestTokenOfMissingUser: a token signed with the right secret for a user
// that does not exist is refused, on every kind of route.
func TestTokenOfMissingUser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now()
	tok := token(t, b.secret, jwt.SigningMethodHS256, api.Claims{Email: "ghost@example.com", IsAdmin: true, IsWorker: true,
		RegisteredClaims: jwt.RegisteredClaims{Issuer: "task-service", Subject: uuid.NewString(),
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}})
	ghost := client.New(b.url, b.http)
	ghost.SetToken(tok)
	_, err := ghost.Workers(b.ctx)
	requireStatus(t, err, http.StatusUnauthorized, "unauthenticated")
	_, err = ghost.MyTasks(b.ctx, false)
	requireStatus(t, err, http.StatusUnauthorized, "unauthenticated")
}

// The account list pages by name, then id: each page's next_cursor
// continues after its last account, the pages hold every account once,
// and the last page has no cursor. Two accounts with one name page apart
// by id.
func TestListWorkersPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, name := range []string{"Eve", "Bob", "Dan", "Cy", "Al"} {
		b.newWorker(t, name, 1)
	}
	_, err := b.admin.CreateWorker(b.ctx, client.NewWorker{Email: "bob2@workers.example.com", Password: workerPass, FullName: "Bob"})
	require.NoError(t, err)

	var names []string
	q := client.AccountQuery{Limit: 2}
	for pages := 1; ; pages++ {
		page, err := b.admin.AccountsPage(b.ctx, q)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Workers), 2)
		for _, w := range page.Workers {
			names = append(names, w.FullName)
		}
		if page.NextCursor == "" {
			require.Equal(t, 3, pages)
			break
		}
		q.After = page.NextCursor
	}
	require.Equal(t, []string{"Al", "Bob", "Bob", "Cy", "Dan", "Eve"}, names, "workers only, by name")

	page, err := b.admin.AccountsPage(b.ctx, client.AccountQuery{Role: "any", Limit: 200})
	require.NoError(t, err)
	require.Len(t, page.Workers, 7, "role=any adds the admin")
	require.Empty(t, page.NextCursor)
	all, err := b.admin.Accounts(b.ctx, "worker")
	require.NoError(t, err)
	require.Len(t, all, 6, "the client reads every page")
}

// A password counts characters, as the document's maxLength does: 72 of
// three bytes each (past bcrypt's 72 bytes) is a password, and only it logs
// in; a wrong current one is a 403 naming the field, not a 400.
func TestPasswordOfManyBytes(t *testing.T) {
	t.Parallel()
	b := setupHub(t)
	ctx := b.ctx
	long := strings.Repeat("日", events.MaxPasswordLen)
	u, err := b.admin.CreateWorker(ctx, client.NewWorker{Email: "kanji@workers.example.com", Password: long, FullName: "Kanji"})
	require.NoError(t, err)
	c := client.New(b.url, b.http)
	_, err = c.Login(ctx, "kanji@workers.example.com", long)
	require.NoError(t, err)
	_, err = client.New(b.url, b.http).Login(ctx, "kanji@workers.example.com", strings.Repeat("日", events.MaxPasswordLen-1)+"月")
	require.Error(t, err, "a password differing past bcrypt's 72 bytes is another password")

	var apiErr *client.Error
	_, err = c.ChangePassword(ctx, "wrong-password", workerPass)
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusForbidden, apiErr.Status)
	require.Equal(t, "current_password", apiErr.Field)

	_, err = b.admin.CreateWorker(ctx, client.NewWorker{Email: "kanji2@workers.example.com", Password: long + "日", FullName: "Kanji"})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "password", apiErr.Field)

	// A short password (the hash of every account before) is bcrypt's own.
	_, err = c.ChangePassword(ctx, long, workerPass)
	require.NoError(t, err)
	_, hash, err := b.db.CredentialsByID(ctx, u.ID)
	require.NoError(t, err)
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(hash), []byte(workerPass)))
}
