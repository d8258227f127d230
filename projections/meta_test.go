package projections_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
)

// Every event type whose rows change with its Meta is listed by ReadsMeta.
func TestReadsMetaListsEveryTypeWhoseRowsReadMeta(t *testing.T) {
	metas := []events.Meta{
		{},
		{Actor: events.Actor{Kind: events.ActorAdmin, ID: "0190a1b2-0000-7000-8000-000000000001"}, RequestID: "r", CausationSeq: 7, CorrelationID: "c"},
		{Actor: events.Actor{Kind: events.ActorSystem, ID: "retry"}},
		{Actor: events.Actor{Kind: events.ActorWorker, ID: "0190a1b2-0000-7000-8000-000000000002"}},
	}
	for _, typ := range events.Types() {
		rowsOf := func(m events.Meta) [][]any {
			e := events.Envelope{StreamType: events.StreamTask, StreamID: "0190a1b2-0000-7000-8000-000000000003",
				Version: 2, Type: typ, SchemaVersion: 1, Meta: m, OccurredAt: time.Unix(1e9, 0).UTC(),
				Data: json.RawMessage(`{"worker_id":"0190a1b2-0000-7000-8000-000000000002","by":"0190a1b2-0000-7000-8000-000000000001","update_id":"0190a1b2-0000-7000-8000-000000000004","message":"m"}`)}
			if err := e.Decode(); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			return [][]any{projections.UpdateRow(e), projections.AssignmentRow(e)}
		}
		first := rowsOf(metas[0])
		varies := false
		for _, m := range metas[1:] {
			if !reflect.DeepEqual(first, rowsOf(m)) {
				varies = true
			}
		}
		if varies && !projections.ReadsMeta(typ) {
			t.Errorf("rows of %s depend on Meta but ReadsMeta(%q) is false", typ, typ)
		}
	}
}
