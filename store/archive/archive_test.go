package archive_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store/archive"
	"github.com/clawdbot/task-service/store/blob"
	"github.com/clawdbot/task-service/store/blob/s3test"
	"github.com/clawdbot/task-service/store/storetest"
)

func TestPeriods(t *testing.T) {
	at := time.Date(2026, 11, 20, 23, 59, 0, 0, time.UTC) // a Friday
	d := archive.PeriodOf(archive.Day, at)
	require.Equal(t, "events/day/2026-11-20.jsonl.gz", d.Key())
	require.Equal(t, "events/day/2026-11-20.manifest.json", d.ManifestKey())
	require.Equal(t, time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC), d.End())
	w := archive.PeriodOf(archive.Week, at)
	require.Equal(t, "events/week/2026-11-16.jsonl.gz", w.Key()) // its Monday
	require.Equal(t, time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), w.End())
	p, err := archive.ParsePeriod(archive.Day, "week/2026-11-16")
	require.NoError(t, err)
	require.Equal(t, w, p)
	_, err = archive.ParsePeriod(archive.Week, "2026-11-17")
	require.ErrorContains(t, err, "a week starts on a Monday (2026-11-16)")
	_, err = archive.ParseKind("month")
	require.ErrorContains(t, err, `want day or week, not "month"`)
}

// Three days of events, some of them stamped out of seq order (a command's
// time taken before its insert), archived on the filesystem and on S3:
// each day's object holds exactly that day's events, once, in seq order,
// readable as plain gzipped JSON lines; a second run writes nothing; a
// changed object is refused naming it.
func TestArchive(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(t *testing.T) blob.Store{
		"filesystem": func(t *testing.T) blob.Store {
			s, err := blob.NewFS(t.TempDir())
			require.NoError(t, err)
			return s
		},
		"s3": func(t *testing.T) blob.Store { return s3test.Shared(t).Store(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := storetest.NewPool(t)
			bs := open(t)
			day0 := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
			// One event every 10 minutes for three days; every seventh is
			// stamped 20 minutes earlier than its place in the log.
			_, err := pool.Exec(ctx, `INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
				SELECT 'task', gen_random_uuid(), 1, 'task.created', jsonb_build_object('title', 'e' || g), '{}',
				       $1::timestamptz + (g * 10 || ' min')::interval - CASE WHEN g % 7 = 0 THEN interval '20 min' ELSE interval '0' END
				  FROM generate_series(0, 3 * 144 - 1) g`, day0)
			require.NoError(t, err)
			now := func() time.Time { return day0.Add(4 * 24 * time.Hour) }
			rep, err := archive.Run(ctx, archive.Config{Pool: pool, Store: bs, Kind: archive.Day, Now: now})
			require.NoError(t, err)
			require.Equal(t, int64(3*144), rep.Events)
			for i := range 3 {
				p := archive.PeriodOf(archive.Day, day0.AddDate(0, 0, i))
				var want int64
				require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM task_events WHERE occurred_at >= $1 AND occurred_at < $2`,
					p.Start, p.End()).Scan(&want))
				m, err := archive.Verify(ctx, bs, p)
				require.NoError(t, err)
				require.Equal(t, want, m.Events, p.String())
				// Plain gzipped JSON lines, in seq order, all of the period.
				r, err := bs.Open(ctx, p.Key())
				require.NoError(t, err)
				gz, err := gzip.NewReader(r)
				require.NoError(t, err)
				sc := bufio.NewScanner(gz)
				var last int64
				n := int64(0)
				for sc.Scan() {
					var l archive.Line
					require.NoError(t, json.Unmarshal(sc.Bytes(), &l))
					require.Greater(t, l.Seq, last)
					last = l.Seq
					require.False(t, l.OccurredAt.Before(p.Start) || !l.OccurredAt.Before(p.End()))
					require.Equal(t, "task.created", l.Type)
					n++
				}
				r.Close()
				require.Equal(t, want, n)
				var verified bool
				require.NoError(t, pool.QueryRow(ctx, `SELECT verified_at IS NOT NULL FROM event_archives WHERE period = 'day' AND period_start = $1`,
					p.Start).Scan(&verified))
				require.True(t, verified)
			}
			// One archiver at a time: while another holds the lock, a run
			// writes nothing (a second writer would replace the objects).
			late := day0.Add(3*24*time.Hour + time.Hour)
			_, err = pool.Exec(ctx, `INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
				VALUES ('task', gen_random_uuid(), 1, 'task.created', '{}', '{}', $1)`, late)
			require.NoError(t, err)
			conn, err := pool.Acquire(ctx)
			require.NoError(t, err)
			_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, archive.LockKey)
			require.NoError(t, err)
			later := func() time.Time { return day0.Add(5 * 24 * time.Hour) }
			held, err := archive.Run(ctx, archive.Config{Pool: pool, Store: bs, Kind: archive.Day, Now: later})
			require.NoError(t, err)
			require.True(t, held.Skipped)
			require.Zero(t, held.Periods)
			_, err = conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, archive.LockKey)
			require.NoError(t, err)
			conn.Release()
			next, err := archive.Run(ctx, archive.Config{Pool: pool, Store: bs, Kind: archive.Day, Now: later})
			require.NoError(t, err)
			require.Equal(t, 1, next.Periods)

			// Written once: a second run finds nothing to do.
			again, err := archive.Run(ctx, archive.Config{Pool: pool, Store: bs, Kind: archive.Day, Now: later})
			require.NoError(t, err)
			require.Zero(t, again.Periods)

			// An object changed behind the archive's back.
			p := archive.PeriodOf(archive.Day, day0)
			r, err := bs.Open(ctx, p.Key())
			require.NoError(t, err)
			b, err := io.ReadAll(r)
			r.Close()
			require.NoError(t, err)
			b[len(b)/2] ^= 0x40
			w, err := bs.Create(ctx, p.Key(), "application/gzip")
			require.NoError(t, err)
			_, err = w.Write(b)
			require.NoError(t, err)
			require.NoError(t, w.Commit(ctx))
			_, err = archive.Verify(ctx, bs, p)
			require.True(t, errors.Is(err, archive.ErrMismatch), "%v", err)
			require.ErrorContains(t, err, p.Key())
		})
	}
}
