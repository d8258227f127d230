// Package reactors runs the work that follows events (DESIGN §5): the Runner
// feeds named reactors their event types in batches, each batch in one
// transaction with the reactor's checkpoint, so effects and progress commit
// together and a crash replays the batch without doing anything twice. Any
// number of instances run the same reactors; the checkpoint row, locked with
// SKIP LOCKED, decides which one works a batch.
//
// Reactors here: retry (task.failed → the retry task, or skipped, or
// exhausted; optionally advised by Claude before the transaction), the stuck
// detector (a ticker under a lease, not a reactor) and telegram (outbox and
// sender, in telegram*.go).
//
// Handlers never make network calls inside their transaction: the
// transaction holds back the consumers' horizon for the whole cluster while
// it is open. Work that needs the network runs in Reactor.Prepare, before.
package reactors
