// Package projections owns the read models: one file per table. Each queues
// its writes on a pgx.Batch that the store sends together with the event
// insert, so a command's projection writes and its events commit in one
// transaction and one round trip.
//
// Rows are written from the fold of the stream (events.Task and friends), so
// the live table and a rebuild from events are equal by construction. The
// same row functions feed the bulk rebuild (replay).
//
// It must not read the database or decide anything: the store has already
// validated the events it is given.
package projections
