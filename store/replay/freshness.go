package replay

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

// A freshness rule's keys are folded from its stream (weight, rising,
// added_at); their state (last completion, open task, due time) is kept by
// the writers of the keys' tasks (projections.FreshnessKeyDerived). Replay
// derives that state from the rebuilt tasks once their indexes are built,
// and verify checks the live state against the live tasks, as for the
// gates (gates.go).

const freshKeysTable = "freshness_keys"

// liveRules are the fold's rules that are not deleted.
func liveRules(f *fold) map[key]*events.FreshnessRule {
	out := make(map[key]*events.FreshnessRule, len(f.rules))
	for k, r := range f.rules {
		if !r.Deleted {
			out[k] = r
		}
	}
	return out
}

// freshnessKeyRows are the folded columns of the live rules' keys, by rule
// and key.
func freshnessKeyRows(f *fold) [][]any {
	var rows [][]any
	for _, k := range slices.SortedFunc(maps.Keys(liveRules(f)), func(a, b key) int { return strings.Compare(a.text(), b.text()) }) {
		r, keys := f.rules[k], f.ruleKeys[k]
		for _, name := range slices.Sorted(maps.Keys(keys)) {
			rows = append(rows, projections.FreshnessKeyRow(r, name, keys[name]))
		}
	}
	return rows
}

// deriveFreshKeys sets the state of every key in the rebuild schema from
// the rebuilt tasks: two index probes a key.
func deriveFreshKeys(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) error {
	if _, err := q.Exec(ctx, projections.DeriveKeys(pgx.Identifier{rebuildSchema}.Sanitize(), "true")); err != nil {
		return fmt.Errorf("derive the state of freshness_keys: %w", err)
	}
	return nil
}

// deriveDeltaFreshKeys derives the keys' state again when f refolded a
// rule or a task that carries a key's unique key.
func deriveDeltaFreshKeys(ctx context.Context, tx pgx.Tx, f *fold) error {
	touched := len(f.rules) > 0
	for _, t := range f.tasks {
		touched = touched || projections.FreshnessKeyOf(t)
	}
	if !touched {
		return nil
	}
	return deriveFreshKeys(ctx, tx)
}

// verifyFreshKeys compares the live state of every key with what the live
// tasks say, adding what differs to freshness_keys' counts.
func verifyFreshKeys(ctx context.Context, tx pgx.Tx, rep *Report, max int) error {
	due := projections.DueAt("s.last", "s.failed", "s.cur")
	rows, err := tx.Query(ctx, `SELECT k.rule_id::text, k.key,
		k.last_completed_at::text, k.last_failed_at::text, k.current_task_id::text, k.due_at::text,
		s.last::text, s.failed::text, s.cur::text, (`+due+`)::text
		FROM freshness_keys k JOIN freshness_rules r ON r.id = k.rule_id
		CROSS JOIN LATERAL (SELECT `+projections.KeyLastCompleted("worker_tasks")+` AS last, `+
		projections.KeyLastFailed("worker_tasks")+` AS failed, `+projections.KeyOpenTask("worker_tasks")+` AS cur) s
		WHERE (k.last_completed_at, k.last_failed_at, k.current_task_id, k.due_at) IS DISTINCT FROM (s.last, s.failed, s.cur, `+due+`)
		ORDER BY k.rule_id, k.key`)
	if err != nil {
		return fmt.Errorf("check the state of freshness_keys: %w", err)
	}
	defer rows.Close()
	c := rep.collect(freshKeysTable, max)
	for rows.Next() {
		var rule, name string
		live, want := make([]*string, 4), make([]*string, 4)
		if err := rows.Scan(&rule, &name, &live[0], &live[1], &live[2], &live[3], &want[0], &want[1], &want[2], &want[3]); err != nil {
			return err
		}
		c.add(Difference{Key: fmt.Sprintf("rule_id=%s, key=%q", rule, name), Side: Changed,
			Columns: projections.FreshnessKeyDerived, Live: live, Events: want})
	}
	return rows.Err()
}
