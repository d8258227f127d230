package replay

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// streamsTable is the guard migration 054 keeps: every stream's head
// version but a task's (ADR 034). It is the log's, not a read model: Rebuild
// leaves it, Verify checks it against the log.
const streamsTable = "event_streams"

// verifyEventStreams compares event_streams with the head version of every
// stream of the log that is not a task's: a head behind the log would let
// a lost race write a version twice, one ahead would refuse every writer.
func verifyEventStreams(ctx context.Context, tx pgx.Tx, rep *Report, max int) error {
	rows, err := tx.Query(ctx, `SELECT coalesce(h.stream_id, l.stream_id)::text, h.version, l.version
		  FROM event_streams h
		  FULL JOIN (SELECT stream_id, max(version) AS version FROM task_events WHERE stream_type <> 'task' GROUP BY stream_id) l
		    ON l.stream_id = h.stream_id
		 WHERE h.version IS DISTINCT FROM l.version
		 ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("check event_streams: %w", err)
	}
	defer rows.Close()
	c := rep.collect(streamsTable, max)
	for rows.Next() {
		var id string
		var live, want *int
		if err := rows.Scan(&id, &live, &want); err != nil {
			return err
		}
		d := Difference{Key: "stream_id=" + id, Side: Changed, Columns: []string{"version"}}
		switch {
		case live == nil:
			d.Side, d.Events = EventsOnly, []*string{itoa(want)}
		case want == nil:
			d.Side, d.Live = LiveOnly, []*string{itoa(live)}
		default:
			d.Live, d.Events = []*string{itoa(live)}, []*string{itoa(want)}
		}
		c.add(d)
	}
	return rows.Err()
}

func itoa(v *int) *string {
	if v == nil {
		return nil
	}
	s := strconv.Itoa(*v)
	return &s
}
