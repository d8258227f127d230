package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store/storetest"
)

// The log's marks grow by one every 15 minutes (35,000 a year): the
// instance's reads of them (every minute) probe log_marks' key, never scan
// the table.
func TestLogMarkReadsPlans(t *testing.T) {
	ctx := context.Background()
	db, err := New(storetest.NewPool(t), Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	_, err = db.pool.Exec(ctx, `INSERT INTO log_marks (tx_id, seq, occurred_at)
		SELECT (g * 1000)::text::xid8, 0, now() - interval '1 year' + g * interval '15 minutes'
		  FROM generate_series(1, 35000) g ON CONFLICT DO NOTHING`)
	require.NoError(t, err)
	_, err = db.pool.Exec(ctx, `ANALYZE log_marks`)
	require.NoError(t, err)
	plan := func(sql string, args ...any) string {
		rows, err := db.pool.Query(ctx, `EXPLAIN `+sql, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	now := time.Now()
	for name, p := range map[string]string{
		"add a mark":          plan(addMarkSQL, now.Add(-ClockSkew), now.Add(-ClockSkew-markEvery), ClockSkew.String()),
		"the marks after one": plan(marksAfterSQL, "34990000", 0),
	} {
		require.NotContains(t, p, "Seq Scan on log_marks", "%s:\n%s", name, p)
		require.Contains(t, p, "log_marks_pkey", "%s:\n%s", name, p)
	}
	require.NoError(t, db.LoadLogMarks(ctx))
}
