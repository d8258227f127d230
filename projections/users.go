package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// UserColumns are the event-derived columns of users, in UserRow order.
// The heartbeat columns (last_activity_at, ...) are live state, not events.
var UserColumns = []string{
	"id", "email", "full_name", "is_admin", "is_worker", "max_concurrent_tasks",
	"online", "created_at", "version", "active", "token_epoch", "locked_until", "lockouts", "offline_since",
}

// UserRow is the users row of a folded user.
func UserRow(u *events.User) []any {
	return []any{u.ID, u.Email, u.FullName, u.IsAdmin, u.IsWorker, u.MaxConcurrentTasks,
		u.Online, u.CreatedAt, u.Version, u.Active, u.TokenEpoch, u.LockedUntil, u.Lockouts, u.OfflineSince}
}

var upsertUser = upsert("users", UserColumns, nil)

func queueUser(b *pgx.Batch, u *events.User) {
	b.Queue(upsertUser, UserRow(u)...)
}
