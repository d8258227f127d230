// Package store is task-service's PostgreSQL layer: the pool, one WithTx
// helper, Append (projection writes plus one multi-row event insert, sent as
// one batch), the commands that decide through package events, the claim,
// the read queries and the consumer read by (tx_id, seq) position.
//
// The hot path (create, claim, complete) runs through batchers: concurrent
// calls of one kind share one statement and one commit (batcher.go, ADR 008).
//
// It imports events, never projections: cmd hands it a Projector. SQL sits
// next to the function that runs it. pgx errors are interpreted in one place
// (errors.go).
package store
