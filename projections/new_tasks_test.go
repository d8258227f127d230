package projections

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

func sampleTasks(n int) []*events.Task {
	now := time.Date(2026, 11, 26, 15, 0, 0, 123456789, time.UTC)
	ts := make([]*events.Task, n)
	for i := range ts {
		key := fmt.Sprintf("key-%d", i)
		ts[i] = &events.Task{ID: fmt.Sprintf("0193a0c4-7b1c-7d52-8c2f-%012d", i), Title: fmt.Sprintf("Crawl r/stocks for NVDA #%d", i),
			Description: "daily crawl, \"quoted\" \\ and <html> & ünïcode\n", TaskTypeID: "0193a0c4-7b1c-7d52-8c2f-1b6a7c1f6b2d",
			Params: json.RawMessage(`{"ticker":"NVDA","days":3}`), Priority: events.PriorityHigh, Status: events.StatusPending,
			CreatedAt: now, UpdatedAt: now, AvailableAt: now, Version: 1, UniqueKey: &key}
	}
	return ts
}

// rowsJSON's output is read by json_populate_recordset: it must be valid
// JSON whose values decode to exactly the task's fields, whatever the text.
func TestRowsJSONDecodesToTheRows(t *testing.T) {
	ts := sampleTasks(3)
	ts[1].Title = "tab\there \x01 \u2028 \"q\" \\ </script>"
	ts[2].Description = string([]byte{'a', 0xff, 'b'}) // invalid UTF-8 becomes U+FFFD, as encoding/json writes it
	out, err := rowsJSON(TaskColumns, ts, TaskRow, map[string]bool{"params": true, "result": true})
	require.NoError(t, err)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal(out, &rows), string(out))
	require.Len(t, rows, 3)
	for i, r := range rows {
		require.Equal(t, ts[i].Title, r["title"])
		require.Equal(t, map[string]any{"ticker": "NVDA", "days": float64(3)}, r["params"])
		require.Equal(t, "2026-11-26T15:00:00.123456Z", r["created_at"])
		require.Nil(t, r["started_at"])
		require.Equal(t, float64(1), r["version"])
		require.Equal(t, *ts[i].UniqueKey, r["unique_key"])
	}
	require.Equal(t, "a\ufffdb", rows[2]["description"])
}

// go test ./projections -run '^$' -bench RowsJSON -benchmem
func BenchmarkRowsJSON(b *testing.B) {
	ts := sampleTasks(1000)
	raw := map[string]bool{"params": true, "result": true}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rowsJSON(TaskColumns, ts, TaskRow, raw); err != nil {
			b.Fatal(err)
		}
	}
}
