package archive_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store/archive"
	"github.com/clawdbot/task-service/store/blob"
	"github.com/clawdbot/task-service/store/storetest"
)

// An archive object is read as it is by an engine that knows nothing of
// task-service: DuckDB runs README's query on it and counts what the log
// held, and reads an event's data as JSON. DuckDB comes from
// scripts/duckdb.sh (npm); without npm the test skips, except under CI=true.
func TestArchiveReadsInDuckDB(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("npm"); err != nil && os.Getenv("CI") != "true" {
		t.Skip("npm is not installed (scripts/duckdb.sh installs it under CI=true)")
	}
	ctx := context.Background()
	pool := storetest.NewPool(t)
	dir := t.TempDir()
	bs, err := blob.NewFS(dir)
	require.NoError(t, err)
	day := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	// A day of events of three types, every 7 minutes.
	_, err = pool.Exec(ctx, `INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
		SELECT 'task', gen_random_uuid(), 1, (ARRAY['task.created', 'task.claimed', 'task.completed'])[1 + g % 3],
		       jsonb_build_object('title', 'e' || g), '{}', $1::timestamptz + (g * 7 || ' min')::interval
		  FROM generate_series(0, 24 * 60 / 7 - 1) g`, day)
	require.NoError(t, err)
	_, err = archive.Run(ctx, archive.Config{Pool: pool, Store: bs, Kind: archive.Day, Now: func() time.Time { return day.AddDate(0, 0, 2) }})
	require.NoError(t, err)
	want := map[string]int64{}
	rows, err := pool.Query(ctx, `SELECT type, count(*) FROM task_events GROUP BY type`)
	require.NoError(t, err)
	for rows.Next() {
		var typ string
		var n int64
		require.NoError(t, rows.Scan(&typ, &n))
		want[typ] = n
	}
	require.NoError(t, rows.Err())
	require.Len(t, want, 3)

	query := func(sql string) []map[string]string {
		t.Helper()
		out, err := exec.Command(filepath.Join("..", "..", "scripts", "duckdb.sh"), dir, sql).Output()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("duckdb.sh: %v\n%s", err, exit.Stderr)
		}
		require.NoError(t, err)
		var got []map[string]string
		require.NoError(t, json.Unmarshal(out, &got), "%s", out)
		return got
	}
	// README's query, word for word but for the day.
	got := map[string]int64{}
	for _, r := range query(`SELECT type, count(*) FROM read_json_auto('events/day/2026-11-20.jsonl.gz') GROUP BY type;`) {
		var n int64
		require.NoError(t, json.Unmarshal([]byte(r["count_star()"]), &n), "%v", r)
		got[r["type"]] = n
	}
	require.Equal(t, want, got)
	first := query(`SELECT seq, data.title AS title FROM read_json_auto('events/day/*.jsonl.gz') ORDER BY seq LIMIT 1`)
	require.Equal(t, "e0", first[0]["title"], "an event's data is JSON DuckDB reads into")
}
