package projections

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// FreshnessRuleColumns are freshness_rules' columns, in FreshnessRuleRow order.
var FreshnessRuleColumns = []string{
	"id", "name", "state", "task_type_id", "max_age_seconds", "spec", "key_count", "tasks_created",
	"paused_reason", "created_by", "created_at", "updated_at", "version",
}

// FreshnessRuleRow is the freshness_rules row of a folded rule.
func FreshnessRuleRow(r *events.FreshnessRule) []any {
	spec, _ := json.Marshal(r.FreshnessSpec) // plain struct: cannot fail
	return []any{
		r.ID, r.Name, string(r.State), r.TaskTypeID, r.MaxAgeSeconds, string(spec), r.KeyCount, r.TasksCreated,
		r.PausedReason, r.CreatedBy, r.CreatedAt, r.UpdatedAt, r.Version,
	}
}

// FreshnessKeyColumns are freshness_keys' columns folded from the rule's
// stream; FreshnessKeyDerived are kept from the keys' tasks.
var (
	FreshnessKeyColumns = []string{"rule_id", "key", "unique_key", "task_type_id", "weight", "rising", "added_at"}
	FreshnessKeyDerived = []string{"last_completed_at", "last_failed_at", "current_task_id", "due_at"}
)

// FreshnessKeyRow is the folded part of one key's row.
func FreshnessKeyRow(r *events.FreshnessRule, key string, k events.KeyState) []any {
	return []any{r.ID, key, events.FreshnessUniqueKey(r.ID, key), r.TaskTypeID, k.Weight, k.Rising, k.AddedAt}
}

var upsertFreshnessRule = upsert("freshness_rules", FreshnessRuleColumns, map[string]string{"spec": "jsonb"})

// DueAt is the SQL of a key's due time, given its newest completion
// (last), its newest failed or cancelled task's end (failed) and its open
// task (cur), for key row k of rule row r: NULL while a task is open or
// the rule is paused; otherwise the max age after the last task ended
// (however it ended: a key whose tasks keep failing gets one a max age,
// not one a look), or at once (added_at) when none ended.
func DueAt(last, failed, cur string) string {
	return fmt.Sprintf(`CASE WHEN r.state = 'active' AND %[3]s IS NULL
		THEN coalesce(greatest(%[1]s, %[2]s) + make_interval(secs => r.max_age_seconds), k.added_at) END`, last, failed, cur)
}

// KeyLastCompleted, KeyLastFailed and KeyOpenTask are the SQL of a key's
// state read from worker_tasks (tasks named w, key row k): what the
// writers keep in the key's row, derived again by replay and checked by
// verify. Each is an index probe (migrations 019 and 027).
func KeyLastCompleted(tasks string) string {
	return fmt.Sprintf(`(SELECT w.completed_at FROM %s w WHERE w.task_type_id = k.task_type_id AND w.unique_key = k.unique_key
		AND w.status = 'completed' ORDER BY w.completed_at DESC LIMIT 1)`, tasks)
}

func KeyLastFailed(tasks string) string {
	return fmt.Sprintf(`(SELECT w.completed_at FROM %s w WHERE w.task_type_id = k.task_type_id AND w.unique_key = k.unique_key
		AND w.status IN ('failed', 'cancelled') ORDER BY w.completed_at DESC LIMIT 1)`, tasks)
}

func KeyOpenTask(tasks string) string {
	return fmt.Sprintf(`(SELECT w.id FROM %s w WHERE w.task_type_id = k.task_type_id AND w.unique_key = k.unique_key
		AND w.status IN ('pending', 'in_progress') LIMIT 1)`, tasks)
}

// DeriveKeys is the statement that sets the task-kept columns of the keys
// of the rules where selects, from worker_tasks. schema qualifies the
// tables ("" for the live ones).
func DeriveKeys(schema, where string) string {
	q := func(t string) string {
		if schema == "" {
			return t
		}
		return schema + "." + t
	}
	return fmt.Sprintf(`UPDATE %[1]s k SET last_completed_at = s.last, last_failed_at = s.failed, current_task_id = s.cur, due_at = %[3]s
		FROM %[2]s r, (SELECT k.rule_id, k.key, %[4]s AS last, %[5]s AS failed, %[6]s AS cur FROM %[1]s k WHERE %[7]s) s
		WHERE r.id = k.rule_id AND s.rule_id = k.rule_id AND s.key = k.key`,
		q("freshness_keys"), q("freshness_rules"), DueAt("s.last", "s.failed", "s.cur"),
		KeyLastCompleted(q("worker_tasks")), KeyLastFailed(q("worker_tasks")), KeyOpenTask(q("worker_tasks")), where)
}

var (
	// syncKeys makes the rule's keys the list given: removed keys go, new
	// ones come with added_at now, kept ones keep their state.
	syncKeys = `WITH n AS (SELECT * FROM unnest($2::text[], $3::int[], $4::boolean[]) AS n(key, weight, rising)),
del AS (DELETE FROM freshness_keys k WHERE k.rule_id = $1 AND NOT EXISTS (SELECT 1 FROM n WHERE n.key = k.key))
INSERT INTO freshness_keys (rule_id, key, unique_key, task_type_id, weight, rising, added_at)
SELECT $1, n.key, 'fresh:' || $1::text || ':' || n.key, $5, n.weight, n.rising, $6 FROM n
ON CONFLICT (rule_id, key) DO UPDATE SET weight = excluded.weight, rising = excluded.rising`

	// deriveNewKeys reads the state of the keys just added (a key watched
	// before may have tasks already).
	deriveNewKeys = DeriveKeys("", "k.rule_id = $1 AND k.added_at = $2")

	// redueKeys recomputes the due times of a rule's keys after its max age
	// or state changed.
	redueKeys = `UPDATE freshness_keys k SET due_at = ` + keyDue + `
  FROM freshness_rules r WHERE r.id = k.rule_id AND k.rule_id = $1 AND k.due_at IS DISTINCT FROM (` + keyDue + `)`
	keyDue = DueAt("k.last_completed_at", "k.last_failed_at", "k.current_task_id")

	deleteFreshnessKeys = `DELETE FROM freshness_keys WHERE rule_id = $1`
	deleteFreshnessRule = `DELETE FROM freshness_rules WHERE id = $1`

	// keyTaskOpened: a task with a key's unique key was created; the key
	// waits for it.
	keyTaskOpened = `UPDATE freshness_keys k SET current_task_id = $3::uuid, due_at = NULL
  WHERE k.unique_key = $1 AND k.task_type_id = $2::uuid`

	// keyTaskEnded: a key's task ended ($4: completed, at $3); the key is
	// due again once its newest completion is older than the max age.
	keyTaskEnded = KeyTaskEnded("$1", "$2::uuid", "$3::timestamptz", "$4::boolean", "$5::uuid", "")
)

// KeyTaskEnded is the statement that records, on the key of unique key
// uk and type typ, that task id ended at at (completed: a boolean). from
// adds FROM items (the completion statement's rows).
func KeyTaskEnded(uk, typ, at, completed, id, from string) string {
	last := fmt.Sprintf("CASE WHEN %s THEN greatest(k.last_completed_at, %s) ELSE k.last_completed_at END", completed, at)
	failed := fmt.Sprintf("CASE WHEN %s THEN k.last_failed_at ELSE greatest(k.last_failed_at, %s) END", completed, at)
	cur := fmt.Sprintf("nullif(k.current_task_id, %s)", id)
	return fmt.Sprintf(`UPDATE freshness_keys k SET last_completed_at = %[1]s, last_failed_at = %[2]s, current_task_id = %[3]s, due_at = %[4]s
  FROM freshness_rules r%[5]s WHERE r.id = k.rule_id AND k.unique_key = %[6]s AND k.task_type_id = %[7]s`,
		last, failed, cur, DueAt(last, failed, cur), from, uk, typ)
}

// FreshnessKeyOf reports whether a task's unique key may be a watched
// key's: only those cost a statement.
func FreshnessKeyOf(t *events.Task) bool {
	return t.UniqueKey != nil && strings.HasPrefix(*t.UniqueKey, "fresh:")
}

// queueKeyTask keeps the key of a task's unique key when the task is
// created or ends.
func queueKeyTask(b *pgx.Batch, before, t *events.Task) {
	if !FreshnessKeyOf(t) {
		return
	}
	open := func(s events.Status) bool { return s == events.StatusPending || s == events.StatusInProgress }
	switch {
	case before == nil && open(t.Status):
		b.Queue(keyTaskOpened, *t.UniqueKey, t.TaskTypeID, t.ID)
	case before != nil && open(before.Status) && !open(t.Status):
		at := t.UpdatedAt
		if t.CompletedAt != nil {
			at = *t.CompletedAt
		}
		b.Queue(keyTaskEnded, *t.UniqueKey, t.TaskTypeID, at, t.Status == events.StatusCompleted, t.ID)
	}
}

// FreshnessRule queues the writes for events appended to one rule's stream.
func (Projector) FreshnessRule(b *pgx.Batch, _, r *events.FreshnessRule, evs []events.Envelope) {
	if r.Deleted {
		b.Queue(deleteFreshnessKeys, r.ID)
		b.Queue(deleteFreshnessRule, r.ID)
		return
	}
	b.Queue(upsertFreshnessRule, FreshnessRuleRow(r)...)
	redue := false
	for _, e := range evs {
		var keys []events.FreshnessKey
		switch p := e.Payload.(type) {
		case events.FreshnessRuleCreated:
			keys = p.Keys
		case events.FreshnessKeysReplaced:
			keys = p.Keys
		case events.FreshnessRuleUpdated, events.FreshnessRulePaused, events.FreshnessRuleResumed:
			redue = true
			continue
		default:
			continue
		}
		names, weights, rising := make([]string, len(keys)), make([]int32, len(keys)), make([]bool, len(keys))
		for i, k := range keys {
			names[i], weights[i], rising[i] = k.Key, int32(k.Weight), k.Rising
		}
		b.Queue(syncKeys, r.ID, names, weights, rising, r.TaskTypeID, e.OccurredAt)
		b.Queue(deriveNewKeys, r.ID, e.OccurredAt)
	}
	if redue {
		b.Queue(redueKeys, r.ID)
	}
}
