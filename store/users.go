package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

const userColumns = `u.id, u.email, u.full_name, u.is_admin, u.is_worker, u.max_concurrent_tasks, u.online, u.created_at, u.version,
 u.active, u.token_epoch, u.locked_until, u.lockouts, u.offline_since`

func userDest(u *events.User) []any {
	return []any{&u.ID, &u.Email, &u.FullName, &u.IsAdmin, &u.IsWorker, &u.MaxConcurrentTasks, &u.Online, &u.CreatedAt, &u.Version,
		&u.Active, &u.TokenEpoch, &u.LockedUntil, &u.Lockouts, &u.OfflineSince}
}

// normalizeUser makes timestamps UTC so a read row equals the fold.
func normalizeUser(u *events.User) {
	u.CreatedAt = u.CreatedAt.UTC()
	u.LockedUntil, u.OfflineSince = utcPtr(u.LockedUntil), utcPtr(u.OfflineSince)
}

// CreateUser registers a user; passwordHash is stored outside the event log
// in the same transaction (ADR 002).
func (db *DB) CreateUser(ctx context.Context, p events.UserRegistered, password, passwordHash string, meta events.Meta) (*events.User, error) {
	ps, err := events.RegisterUser(p, password)
	if err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	credentials := func(b *pgx.Batch) {
		b.Queue(`INSERT INTO user_credentials (user_id, password_hash) VALUES ($1, $2)`, id.String(), passwordHash)
	}
	u, _, err := appendStream(ctx, db, db.pool, events.StreamUser, id.String(), nil, ps, meta, db.projector.User, credentials)
	if dup := (*events.DuplicateError)(nil); errors.As(err, &dup) {
		dup.Value = ps[0].(events.UserRegistered).Email
	}
	return u, err
}

// GetUser reads a user.
func (db *DB) GetUser(ctx context.Context, id string) (*events.User, error) {
	var u events.User
	err := db.pool.QueryRow(ctx, `SELECT `+userColumns+` FROM users u WHERE u.id = $1`, id).Scan(userDest(&u)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, events.NotFound("user", id)
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("get user: %w", err))
	}
	normalizeUser(&u)
	return &u, nil
}

// Credentials returns the user with email and its password hash.
func (db *DB) Credentials(ctx context.Context, email string) (*events.User, string, error) {
	var u events.User
	var hash string
	err := db.pool.QueryRow(ctx, `SELECT `+userColumns+`, c.password_hash
		FROM users u JOIN user_credentials c ON c.user_id = u.id WHERE u.email = lower($1)`, email).
		Scan(append(userDest(&u), &hash)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", events.NotFound("user", email)
	}
	if err != nil {
		return nil, "", mapErr(fmt.Errorf("credentials: %w", err))
	}
	normalizeUser(&u)
	return &u, hash, nil
}

// AdminExists reports whether any admin is registered.
func (db *DB) AdminExists(ctx context.Context) (bool, error) {
	var ok bool
	err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM users WHERE is_admin)`).Scan(&ok)
	return ok, mapErr(err)
}

// HeartbeatParams is what a worker reports.
type HeartbeatParams struct {
	Status        string
	CurrentTaskID *string
	Metadata      json.RawMessage
}

// Heartbeat records that a worker is alive. It is not an event (DESIGN §3);
// only a worker marked offline coming back appends worker.went_online.
func (db *DB) Heartbeat(ctx context.Context, workerID string, p HeartbeatParams, meta events.Meta) (*events.User, error) {
	var u events.User
	var lastSeen *time.Time
	var metadata any
	if len(p.Metadata) > 0 {
		metadata = string(p.Metadata)
	}
	err := db.pool.QueryRow(ctx, `UPDATE users u SET last_activity_at = $2, heartbeat_status = $3,
		    current_task_id = $4, heartbeat_metadata = $5::jsonb
		  FROM users old WHERE u.id = $1 AND old.id = u.id AND u.is_worker
		RETURNING `+userColumns+`, old.last_activity_at`,
		workerID, db.Now(), nullIfEmpty(p.Status), p.CurrentTaskID, metadata).Scan(append(userDest(&u), &lastSeen)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s is not a worker", events.ErrForbidden, workerID)
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("heartbeat: %w", err))
	}
	normalizeUser(&u)
	if p.Status == HeartbeatOffline {
		return db.heartbeatOffline(ctx, &u, meta)
	}
	if u.Online {
		return &u, nil
	}
	var before string
	if lastSeen != nil {
		before = lastSeen.UTC().Format(time.RFC3339Nano)
	}
	after, _, err := appendStream(ctx, db, db.pool, events.StreamUser, u.ID, &u,
		[]events.Payload{events.WorkerWentOnline{LastSeenBefore: before}}, meta, db.projector.User, nil)
	if errors.Is(err, events.ErrConflict) {
		return db.GetUser(ctx, workerID) // a concurrent heartbeat already said so
	}
	return after, err
}

// HeartbeatOffline is the heartbeat status of a worker going away (the
// reference worker sends it when it shuts down).
const HeartbeatOffline = "offline"

// heartbeatOffline takes a worker that said it is going offline offline at
// once, with worker.went_offline (rule heartbeat_offline).
func (db *DB) heartbeatOffline(ctx context.Context, u *events.User, meta events.Meta) (*events.User, error) {
	var inProgress int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks WHERE assigned_to = $1 AND status = 'in_progress'`,
		u.ID).Scan(&inProgress); err != nil {
		return nil, mapErr(fmt.Errorf("heartbeat: %w", err))
	}
	ps := u.HeartbeatOffline(inProgress)
	if len(ps) == 0 {
		return u, nil
	}
	after, _, err := appendStream(ctx, db, db.pool, events.StreamUser, u.ID, u, ps, meta, db.projector.User, nil)
	if errors.Is(err, events.ErrConflict) {
		return db.GetUser(ctx, u.ID)
	}
	return after, err
}

// WorkerView is a worker as admins see it.
type WorkerView struct {
	events.User
	LastActivityAt  *time.Time      `json:"last_activity_at"`
	HeartbeatStatus *string         `json:"heartbeat_status"`
	CurrentTaskID   *string         `json:"current_task_id"`
	Metadata        json.RawMessage `json:"metadata"`
	InProgressCount int             `json:"in_progress_count"`
	// PendingCount is the tasks assigned to the worker that still wait
	// for it (pending; scheduled ones included).
	PendingCount   int `json:"pending_count"`
	CompletedToday int `json:"completed_today"`
	AvailableSlots int `json:"available_slots"`
}

// workerViewsSQL reads each worker's tasks in progress and waiting for it
// through worker_tasks_holder, bounded by what the worker does now, and its
// completions on day $1 from one worker_day_completions row, however busy
// the day (ADR 010).
func workerViewsSQL(where string) string {
	return `SELECT ` + userColumns + `, u.last_activity_at, u.heartbeat_status,
    u.current_task_id, u.heartbeat_metadata,
    (SELECT count(*) FROM worker_tasks t WHERE t.assigned_to = u.id AND t.status = 'in_progress'),
    (SELECT count(*) FROM worker_tasks t WHERE t.assigned_to = u.id AND t.status = 'pending'),
    coalesce((SELECT d.completed FROM worker_day_completions d WHERE d.worker_id = u.id AND d.day = $1::date), 0)
  FROM users u WHERE ` + where + ` ORDER BY u.full_name, u.id`
}

// AccountRole picks the accounts a listing shows.
type AccountRole string

const (
	RoleWorker AccountRole = "worker"
	RoleAdmin  AccountRole = "admin"
	RoleAny    AccountRole = "any"
)

// ListAccounts lists every account that has role (any: every account)
// with its activity; for the few (the admins), since it is not paged
// (ListAccountsPage is). Online means the worker is marked online, was
// heard from within the offline threshold and did not say it was going
// offline.
func (db *DB) ListAccounts(ctx context.Context, role AccountRole) ([]WorkerView, error) {
	return db.workerViews(ctx, role.where(), 0)
}

// where is the condition on users u that role selects.
func (role AccountRole) where() string {
	switch role {
	case RoleAdmin:
		return `u.is_admin`
	case RoleAny:
		return `true`
	}
	return `u.is_worker`
}

// MaxAccountPage bounds a page of the account list.
const MaxAccountPage = 200

// AccountFilter picks a page of the account list.
type AccountFilter struct {
	Role  AccountRole
	After string // the NextCursor of the previous page; "" for the first
	Limit int    // 1 to MaxAccountPage; 0 means 50
}

// AccountPage is a page of the account list, by name then id.
type AccountPage struct {
	Workers    []WorkerView `json:"workers"`
	NextCursor string       `json:"next_cursor,omitempty" doc:"pass as after for the next page"`
}

// ListAccountsPage pages through the accounts with f.Role by name, then
// id, by keyset through users_by_name: a page costs the same however many
// accounts there are.
func (db *DB) ListAccountsPage(ctx context.Context, f AccountFilter) (*AccountPage, error) {
	limit := f.Limit
	if limit == 0 {
		limit = 50
	}
	if limit < 1 || limit > MaxAccountPage {
		return nil, events.Invalid("limit", "must be a whole number from 1 to %d", MaxAccountPage)
	}
	where, args := f.Role.where(), []any{}
	if f.After != "" {
		name, id, err := decodeCursor(f.After)
		if err != nil {
			return nil, err
		}
		if _, err := uuid.Parse(id); err != nil {
			return nil, events.Invalid("after", "not a cursor from this list")
		}
		where += ` AND (u.full_name, u.id) > ($2, $3::uuid)`
		args = append(args, name, id)
	}
	ws, err := db.workerViews(ctx, where, limit+1, args...)
	if err != nil {
		return nil, err
	}
	page := &AccountPage{Workers: ws}
	if len(ws) > limit {
		page.Workers = ws[:limit]
		last := ws[limit-1]
		page.NextCursor = encodeCursor(last.FullName, last.ID)
	}
	return page, nil
}

// WorkerCounts counts the workers and those online, as Stats shows them:
// one count over users, never the workers' activity.
func (db *DB) WorkerCounts(ctx context.Context) (online, total int, err error) {
	err = db.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM users WHERE is_worker AND online AND last_activity_at > $1),
		(SELECT count(*) FROM users WHERE is_worker)`, db.Now().Add(-db.offlineAfter)).Scan(&online, &total)
	return online, total, mapErr(err)
}

// GetWorkerView reads one user (worker or admin) as admins see workers.
func (db *DB) GetWorkerView(ctx context.Context, id string) (*WorkerView, error) {
	ws, err := db.workerViews(ctx, `u.id = $2`, 0, id)
	if err != nil {
		return nil, err
	}
	if len(ws) == 0 {
		return nil, events.NotFound("user", id)
	}
	return &ws[0], nil
}

// workerViews reads the accounts where says, by name; limit > 0 reads that
// many at most.
func (db *DB) workerViews(ctx context.Context, where string, limit int, args ...any) ([]WorkerView, error) {
	now := db.Now()
	today := projections.UTCDay(now)
	query := workerViewsSQL(where)
	if limit > 0 {
		query += ` LIMIT ` + strconv.Itoa(limit)
	}
	rows, err := db.pool.Query(ctx, query, append([]any{today}, args...)...)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list workers: %w", err))
	}
	defer rows.Close()
	out := []WorkerView{}
	for rows.Next() {
		var w WorkerView
		dest := append(userDest(&w.User), &w.LastActivityAt, &w.HeartbeatStatus, &w.CurrentTaskID, &w.Metadata,
			&w.InProgressCount, &w.PendingCount, &w.CompletedToday)
		if err := rows.Scan(dest...); err != nil {
			return nil, mapErr(err)
		}
		normalizeUser(&w.User)
		w.Online = w.Online && w.LastActivityAt != nil && now.Sub(*w.LastActivityAt) < db.offlineAfter &&
			(w.HeartbeatStatus == nil || *w.HeartbeatStatus != HeartbeatOffline)
		w.AvailableSlots = max(0, w.MaxConcurrentTasks-w.InProgressCount)
		out = append(out, w)
	}
	return out, mapErr(rows.Err())
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// InProgressUnder counts the tasks in progress under a worker.
func (db *DB) InProgressUnder(ctx context.Context, workerID string) (int, error) {
	var n int
	err := db.pool.QueryRow(ctx, `SELECT count(*) FROM worker_tasks WHERE assigned_to = $1 AND status = 'in_progress'`, workerID).Scan(&n)
	return n, mapErr(err)
}
