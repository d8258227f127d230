package replay_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store/replay"
	"github.com/clawdbot/task-service/store/storetest"
)

// event_streams, the guard of every stream but a task's (migration 054),
// is checked against the log's heads: clean after a workload, and a head
// moved, dropped or made up by hand is reported by its stream.
func TestVerifyChecksTheStreamHeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := storetest.NewPool(t)
	w := newWorkload(t, pool, 4)
	w.runConcurrently(ctx, t, 2, 200, 1)
	requireClean(t, verify(t, pool))
	require.Positive(t, count(t, pool, `SELECT count(*) FROM event_streams`))

	var moved, dropped string
	require.NoError(t, pool.QueryRow(ctx, `SELECT stream_id::text FROM event_streams ORDER BY stream_id LIMIT 1`).Scan(&moved))
	require.NoError(t, pool.QueryRow(ctx, `SELECT stream_id::text FROM event_streams ORDER BY stream_id DESC LIMIT 1`).Scan(&dropped))
	made := "00000000-0000-0000-0000-0000000000ab"
	for _, sql := range []string{
		`UPDATE event_streams SET version = version + 1 WHERE stream_id = '` + moved + `'`,
		`DELETE FROM event_streams WHERE stream_id = '` + dropped + `'`,
		`INSERT INTO event_streams (stream_id, version) VALUES ('` + made + `', 3)`,
	} {
		_, err := pool.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	rep := verify(t, pool)
	got := map[string]replay.Difference{}
	for _, d := range rep.Differences {
		got[d.Table+" "+d.Key] = d
	}
	require.Len(t, got, 3, "differences: %+v", rep.Differences)
	require.Equal(t, replay.Changed, got["event_streams stream_id="+moved].Side)
	require.Equal(t, replay.EventsOnly, got["event_streams stream_id="+dropped].Side)
	require.Equal(t, replay.LiveOnly, got["event_streams stream_id="+made].Side)
}
