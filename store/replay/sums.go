package replay

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/projections"
)

// The sum tables (LLM usage, a worker's completions per day) are counters
// over many streams, so they are not folded per range of streams like the
// other projections: replay sums their events in SQL, where the event data
// already says where each one counts (projections.SumTables). A rebuild
// sums the snapshot's events into the fresh tables after the load and adds
// each catch-up's new events; Verify compares the sums with the live rows.

var sumTables = projections.SumTables()

// countedEvents is the log as the sum tables count it: every event but a
// compaction, and in place of each compaction (at its position) the
// replaced events the sums count: its usage reports, and what its final
// state says a finished task had exactly one of — its completion (by its
// holder, at completed_at), its failure, and for a retry its creation.
// A compaction whose originals the log holds too (the archive plus the
// live log, LoadArchive) is marked in its meta and counts nothing.
const countedEvents = `(SELECT seq, tx_id, stream_id, type, data, occurred_at FROM task_events WHERE type <> 'task.compacted'
UNION ALL
SELECT c.seq, c.tx_id, c.stream_id, x->>'type', x->'data', (x->>'occurred_at')::timestamptz
  FROM task_events c CROSS JOIN LATERAL jsonb_array_elements(coalesce(c.data->'usage', '[]')) x
 WHERE c.type = 'task.compacted' AND NOT c.meta ? 'originals_archived'
UNION ALL
SELECT c.seq, c.tx_id, c.stream_id, 'task.' || (c.data->'task'->>'status'),
       jsonb_build_object('worker_id', c.data->'task'->'assigned_to'), (c.data->'task'->>'completed_at')::timestamptz
  FROM task_events c WHERE c.type = 'task.compacted' AND NOT c.meta ? 'originals_archived'
   AND c.data->'task'->>'status' IN ('completed', 'failed')
UNION ALL
SELECT c.seq, c.tx_id, c.stream_id, 'task.created', jsonb_build_object('retry_count', (c.data->'task'->>'retry_count')::int),
       (c.data->'task'->>'created_at')::timestamptz
  FROM task_events c WHERE c.type = 'task.compacted' AND NOT c.meta ? 'originals_archived'
   AND (c.data->'task'->>'retry_count')::int > 0)`

// eventSums selects t's rows as the sums of its events meeting where.
func eventSums(t projections.SumTable, where string) string {
	cond := "e.type IN ('" + strings.Join(t.Events, "', '") + "') AND " + where
	if t.Only != "" {
		cond += " AND " + t.Only
	}
	group := make([]string, len(t.Key))
	for i := range t.Key {
		group[i] = fmt.Sprint(i + 1)
	}
	return fmt.Sprintf(`SELECT %s, %s FROM `+countedEvents+` e WHERE %s GROUP BY %s`,
		strings.Join(t.KeySQL, ", "), strings.Join(t.SumsSQL, ", "), cond, strings.Join(group, ", "))
}

func sumColumns(t projections.SumTable) string {
	return strings.Join(append(append([]string{}, t.Key...), t.Columns...), ", ")
}

// loadSums writes the totals of the events visible in snapshot into the
// fresh tables.
func (r *rebuilder) loadSums(ctx context.Context, snapshot string) error {
	for _, t := range sumTables {
		tag, err := r.conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (%s) %s`,
			pgx.Identifier{rebuildSchema, t.Name}.Sanitize(), sumColumns(t),
			eventSums(t, `pg_visible_in_snapshot(e.tx_id, $1::text::pg_snapshot)`)), snapshot)
		if err != nil {
			return fmt.Errorf("write %s: %w", t.Name, err)
		}
		r.rep.Rows[t.Name] = tag.RowsAffected()
	}
	return nil
}

// addSumsDelta adds the events r.seen could not see to the fresh totals,
// in tx; it returns the new rows per table.
func (r *rebuilder) addSumsDelta(ctx context.Context, tx pgx.Tx) (map[string]int64, error) {
	added := map[string]int64{}
	for _, t := range sumTables {
		fresh := pgx.Identifier{rebuildSchema, t.Name}.Sanitize()
		var n int64
		err := tx.QueryRow(ctx, fmt.Sprintf(`WITH up AS (
    INSERT INTO %s AS u (%s) %s ON CONFLICT (%s) DO UPDATE SET %s RETURNING xmax = 0 AS inserted
) SELECT count(*) FILTER (WHERE inserted) FROM up`,
			fresh, sumColumns(t), eventSums(t, afterSeen), strings.Join(t.ConflictKey(), ", "), t.AddCounters("u")), r.seen).Scan(&n)
		if err != nil {
			return nil, fmt.Errorf("catch up %s: %w", t.Name, err)
		}
		added[t.Name] = n
	}
	return added, nil
}

// verifySums compares each live sum table with the sums of the events,
// both ways, in tx's snapshot (a sharded table's rows summed per key).
func verifySums(ctx context.Context, tx pgx.Tx, rep *Report, max int) error {
	for _, t := range sumTables {
		live := pgx.Identifier{t.Name}.Sanitize()
		if t.Sharded {
			sums := make([]string, len(t.Columns))
			for i, c := range t.Columns {
				sums[i] = "sum(" + c + ")::bigint AS " + c
			}
			live = fmt.Sprintf("(SELECT %s, %s FROM %s GROUP BY %s)", strings.Join(t.Key, ", "), strings.Join(sums, ", "),
				live, strings.Join(t.Key, ", "))
		}
		var on, lkeys, rkeys, lcols, rcols []string
		for _, k := range t.Key {
			q := pgx.Identifier{k}.Sanitize()
			on = append(on, "l."+q+" = r."+q)
			lkeys, rkeys = append(lkeys, "l."+q+"::text"), append(rkeys, "r."+q+"::text")
		}
		for _, c := range t.Columns {
			lcols, rcols = append(lcols, "l."+c), append(rcols, "r."+c)
		}
		rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT concat_ws(' ', %s), concat_ws(' ', %s), l.%s IS NOT NULL, r.%s IS NOT NULL,
       %s, %s
  FROM %s l FULL JOIN (%s) r (%s) ON %s
 WHERE (%s) IS DISTINCT FROM (%s)`,
			strings.Join(lkeys, ", "), strings.Join(rkeys, ", "), t.Key[0], t.Key[0],
			textCols(lcols), textCols(rcols),
			live, eventSums(t, "true"), sumColumns(t), strings.Join(on, " AND "),
			strings.Join(lcols, ", "), strings.Join(rcols, ", ")))
		if err != nil {
			return fmt.Errorf("verify %s: %w", t.Name, err)
		}
		td := TableDiff{}
		n := len(t.Columns)
		for rows.Next() {
			var lkey, rkey string
			var inLive, inFold bool
			vals := make([]*string, 2*n)
			dest := []any{&lkey, &rkey, &inLive, &inFold}
			for i := range vals {
				dest = append(dest, &vals[i])
			}
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return fmt.Errorf("verify %s: %w", t.Name, err)
			}
			if inLive {
				td.LiveRows++
			}
			if inFold {
				td.FoldRows++
			}
			if int(td.LiveRows+td.FoldRows) > 2*max {
				rep.Truncated = true
				continue
			}
			d := Difference{Table: t.Name, Key: lkey, Columns: t.Columns}
			switch {
			case inLive && inFold:
				d.Side, d.Live, d.Events = Changed, vals[:n], vals[n:]
				for i, c := range t.Columns {
					if !sameValue(vals[i], vals[n+i]) {
						d.Changed = append(d.Changed, c)
					}
				}
			case inLive:
				d.Side, d.Live = LiveOnly, vals[:n]
			default:
				d.Side, d.Events, d.Key = EventsOnly, vals[n:], rkey
			}
			rep.Differences = append(rep.Differences, d)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("verify %s: %w", t.Name, err)
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{t.Name}.Sanitize()).Scan(&td.Rows); err != nil {
			return fmt.Errorf("verify %s: %w", t.Name, err)
		}
		rep.Tables[t.Name] = td
	}
	return nil
}

func textCols(cols []string) string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = c + "::text"
	}
	return strings.Join(out, ", ")
}
