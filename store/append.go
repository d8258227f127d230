package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// stamp numbers new payloads after the stream's current version and marshals
// their data.
func stamp(streamType, streamID string, version int, ps []events.Payload, meta events.Meta, at time.Time) ([]events.Envelope, error) {
	out := make([]events.Envelope, len(ps))
	for i, p := range ps {
		e := events.New(streamType, streamID, p, meta, at)
		e.Version = version + i + 1
		data, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("marshal %s: %w", e.Type, err)
		}
		e.Data = data
		out[i] = e
	}
	return out, nil
}

const insertEvents = `INSERT INTO task_events (stream_type, stream_id, version, type, schema_version, data, meta, occurred_at)
SELECT st, sid, v, t, sv, d::jsonb, m::jsonb, at
FROM unnest($1::text[], $2::uuid[], $3::int[], $4::text[], $5::int[], $6::text[], $7::text[], $8::timestamptz[])
    AS e(st, sid, v, t, sv, d, m, at)`

// queueEvents adds the one multi-row insert of evs to b.
func queueEvents(b *pgx.Batch, evs []events.Envelope) error {
	n := len(evs)
	st, sid, t, d, m := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	v, sv := make([]int32, n), make([]int32, n)
	at := make([]time.Time, n)
	for i, e := range evs {
		meta, err := json.Marshal(e.Meta)
		if err != nil {
			return fmt.Errorf("marshal meta: %w", err)
		}
		st[i], sid[i], v[i], t[i], sv[i], d[i], m[i], at[i] = e.StreamType, e.StreamID, int32(e.Version), e.Type, int32(e.SchemaVersion), string(e.Data), string(meta), e.OccurredAt
	}
	b.Queue(insertEvents, st, sid, v, t, sv, d, m, at)
	return nil
}

// send runs a batch: one round trip; outside a transaction PostgreSQL runs it
// as one implicit transaction, so the projection writes and the events
// commit together or not at all.
// evs are the events b inserts, counted once they commit; task, when
// given, is their task's state after them (see storeMetrics.observe).
func (db *DB) send(ctx context.Context, q Querier, b *pgx.Batch, evs []events.Envelope, task *events.Task) error {
	q = db.ambient(ctx, q)
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return mapErr(err)
	}
	db.wrote(q, evs, task)
	return nil
}

// aggregate is a stream's fold: events.Task, events.TaskType, events.User.
type aggregate[T any] interface {
	*T
	Apply(events.Envelope)
	StreamVersion() int
}

// appendStream stamps ps onto a stream after before (nil for a new stream),
// folds them, and sends the events, the projection writes (project) and any
// extra writes that must commit with them (a new user's credentials) as one
// batch. It returns the state after the events.
func appendStream[T any, A aggregate[T]](ctx context.Context, db *DB, q Querier, streamType, id string,
	before *T, ps []events.Payload, meta events.Meta,
	project func(b *pgx.Batch, before, after *T, evs []events.Envelope), extra func(*pgx.Batch),
) (*T, []events.Envelope, error) {
	b := &pgx.Batch{}
	after, evs, err := projectStream[T, A](b, db.Now(), streamType, id, before, ps, meta, project)
	if err != nil {
		return nil, nil, err
	}
	if err := queueEvents(b, evs); err != nil {
		return nil, nil, err
	}
	if extra != nil {
		extra(b)
	}
	task, _ := any(after).(*events.Task)
	if err := db.send(ctx, q, b, evs, task); err != nil {
		return nil, nil, err
	}
	return after, evs, nil
}

// projectStream stamps ps onto a stream after before (nil for a new
// stream), folds them, and queues the projection writes of the state after
// them on b. The caller queues the events after: projection rows first,
// events second, the row lock before the stream's head,
// the same order as the claim (which locks the row FOR UPDATE, then inserts
// task.claimed). The other order deadlocks against a concurrent claim of
// the same task. A lost race fails the batch in the stream's guard (a
// task's row written only at the version folded from, another stream's
// head in event_streams; ADR 034), which rolls everything back.
func projectStream[T any, A aggregate[T]](b *pgx.Batch, at time.Time, streamType, id string,
	before *T, ps []events.Payload, meta events.Meta, project func(b *pgx.Batch, before, after *T, evs []events.Envelope),
) (*T, []events.Envelope, error) {
	var after T
	version := 0
	if before != nil {
		after = *before
		version = A(before).StreamVersion()
	}
	evs, err := stamp(streamType, id, version, ps, meta, at)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range evs {
		A(&after).Apply(e)
	}
	project(b, before, &after, evs)
	return &after, evs, nil
}

// appendTask appends to a task's stream; a completion or the end of a
// retry chain also unblocks or cancels the tasks that wait for it, in the
// same batch (queueDependencyEffects).
func (db *DB) appendTask(ctx context.Context, q Querier, id string, before *events.Task, ps []events.Payload, meta events.Meta) (*events.Task, []events.Envelope, error) {
	project := func(b *pgx.Batch, before, after *events.Task, evs []events.Envelope) {
		db.projector.Task(b, before, after, evs)
		queueDependencyEffects(b, before, after, db.Now())
	}
	return appendStream(ctx, db, q, events.StreamTask, id, before, ps, meta, project, nil)
}
