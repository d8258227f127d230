package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store/storetest"
)

// Reads take the meta's fields as columns (eventColumns) instead of
// decoding its JSON: every field comes back as written, an absent one as
// its zero value, and the data as stored.
func TestEventMetaReadsBack(t *testing.T) {
	db, err := New(storetest.NewPool(t), Config{Projector: projections.Projector{}})
	require.NoError(t, err)
	ctx := t.Context()
	full := events.Meta{Actor: events.Actor{Kind: events.ActorTelegram, ID: "telegram:42", Name: `Ann "the admin" Ö`},
		RequestID: "req-1", CausationSeq: 9_000_000_001, CorrelationID: "0193a1b2-0000-7000-8000-000000000001"}
	fullJSON, err := json.Marshal(full)
	require.NoError(t, err)
	stream := "0193a1b2-0000-7000-8000-0000000000aa"
	for i, meta := range []string{string(fullJSON), `{}`, `{"actor": {"kind": "system", "id": "retry"}}`} {
		_, err := db.Pool().Exec(ctx, `INSERT INTO task_events (stream_type, stream_id, version, type, data, meta, occurred_at)
			VALUES ('task', $1, $2, 'task.created', '{"title": "x", "params": {"n": [1, 2]}}', $3, now())`, stream, i+1, meta)
		require.NoError(t, err)
	}
	want := []events.Meta{full, {}, {Actor: events.System("retry")}}
	check := func(evs []events.Envelope) {
		require.Len(t, evs, len(want))
		for i, e := range evs {
			require.Equal(t, want[i], e.Meta, "event %d", i+1)
			require.JSONEq(t, `{"title": "x", "params": {"n": [1, 2]}}`, string(e.Data))
			require.NotNil(t, e.Payload)
		}
	}
	evs, err := db.Stream(ctx, db.Pool(), stream)
	require.NoError(t, err)
	check(evs)
	// The log's reads see them once no older transaction hides them.
	require.Eventually(t, func() bool {
		evs, _, err = db.ReadLogPage(ctx, db.Pool(), events.Position{}, 100, LogFilter{StreamID: stream})
		require.NoError(t, err)
		return len(evs) == len(want)
	}, 30*time.Second, 20*time.Millisecond)
	check(evs)
}
