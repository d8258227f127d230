// Package whatif re-runs a changed retry and offline policy over the
// recorded events and says what would have differed (ADR 030): which retry
// chains would have been retried or not, skipped or not, failed by the
// stuck detector or not, and how their time to a final outcome moves.
//
// It reads task_events inside one REPEATABLE READ READ ONLY transaction,
// streamed in seq order, and keeps in memory only the chains still open
// (at most Config.MaxOpenChains at once, or the run is refused) and the
// workers' recorded silences. It writes nothing and decides
// nothing that any other part of the service sees.
package whatif
