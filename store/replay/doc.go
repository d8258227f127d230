// Package replay rebuilds the read models from the event log and checks
// them against it (DESIGN §6).
//
// Verify folds every event in memory inside one REPEATABLE READ READ ONLY
// transaction, writes the folded rows to temporary tables with COPY and
// diffs them both ways against the live tables with SQL. Rebuild folds the
// log the same way into fresh tables, catches up with the events appended
// meanwhile and swaps the fresh tables in under a short lock (ADR 006).
//
// It owns the projection tables while it runs and nothing else: it reads
// task_events, never writes it, and never decides anything. Rows come from
// package projections, the same functions the write path uses, so a live
// table and a rebuild are equal by construction and any difference is a bug.
package replay

// MemoryLimit is the Go heap's soft limit a process sets while it rebuilds
// or verifies (taskctl replay, taskbench scale): the fold's memory is
// bounded by its ranges of streams, and the limit keeps the garbage
// collector ahead of it.
const MemoryLimit = 640 << 20
