#!/usr/bin/env bash
# bench-compaction.sh — the reads while the event log is compacted (issue 28, ADR 035).
#
#   scripts/bench-compaction.sh            (make bench-compaction)
#
# On the 1M-task database of `make bench-scale` (taskservice_scale_1m, built first if
# missing), with a lane of `taskbench lanes` creating, claiming and completing tasks all
# along (one run, mode store+create: no pre-fill, and no scratch database made again or
# checkpoint forced between runs while the reads are timed):
#   1. a fresh copy of the uncompacted log: the first run keeps the built database as
#      taskservice_scale_1m_uncompacted, every run starts again from it;
#   2. the archive: task-service with EVENT_RETENTION=31d (the older half of the tasks)
#      writes every period before the retention into ARCHIVE_DIR, and is stopped as the
#      archive is done (a compaction pass may have begun);
#   3. `taskbench scale --sizes 1m` once before compaction, then task-service again,
#      compacting with its defaults (EVENT_COMPACTION_SHARE and the rest), and
#      `taskbench scale` RUNS times while it runs;
#   4. the log's rows and bytes before and after, and every read (and write) over 20 ms
#      at p99.
#
# Environment:
#   DATABASE_URL   the PostgreSQL server (default: scripts/devdb.sh's); only the
#                  taskservice_scale_1m* and taskservice_bench databases are written
#   BIN            where task-service and taskbench are (default bin/, built by make)
#   RUNS           taskbench scale runs during compaction (default 4)
#   CALLS          timed calls per read and run (default 200: the p99 is then the third
#                  slowest call, where 60 calls make it the second slowest, a p98)
#   LANE_WORKERS   the lane's workers (default 16, which keeps both cores of a 2-core
#                  machine busy; 1 is make bench's lightest lane)
#   ARCHIVE_DIR    the archive's directory (default .data/compaction-archive, emptied)
#   OUT            where the logs and tables go (default .data/bench-compaction)
# Progress goes to stderr; the tables to OUT/scale*.txt and the summary to stdout.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN="${BIN:-$REPO/bin}"
RUNS="${RUNS:-4}"
CALLS="${CALLS:-200}"
LANE_WORKERS="${LANE_WORKERS:-16}"
case "$LANE_WORKERS" in ''|*[!0-9]*|0) echo "bench-compaction: LANE_WORKERS must be a number of workers, 1 or more (got '$LANE_WORKERS')" >&2; exit 2;; esac
case "$CALLS" in ''|*[!0-9]*|0|1) echo "bench-compaction: CALLS must be a number of calls, 2 or more (got '$CALLS')" >&2; exit 2;; esac
# One lane run outlasts the reads (it is stopped after them): 4M tasks, which taskbench
# lanes asks for as tasks x workers / 16 below 16 workers.
lane_tasks=4000000
[ "$LANE_WORKERS" -ge 16 ] || lane_tasks=$((lane_tasks * 16 / LANE_WORKERS))
ARCHIVE_DIR="${ARCHIVE_DIR:-$REPO/.data/compaction-archive}"
OUT="${OUT:-$REPO/.data/bench-compaction}"
URL="${DATABASE_URL:-$("$REPO/scripts/devdb.sh")}"
server="${URL%%\?*}"; server="${server%/*}"
db() { echo "$server/$1?sslmode=disable"; }
log() { printf 'bench-compaction: %s\n' "$*" >&2; }
die() { printf 'bench-compaction: error: %s\n' "$*" >&2; exit 1; }
sql() { psql -X -q -At -v ON_ERROR_STOP=1 "$(db "$1")" -c "$2"; }
for b in task-service taskbench; do [ -x "$BIN/$b" ] || die "$BIN/$b is missing: run make bench-compaction, or build it with go build -o bin/ ./cmd/$b"; done
command -v psql >/dev/null || die "psql is missing: apt-get install postgresql-client-15"

mkdir -p "$OUT"
rm -f "$OUT"/scale*.txt "$OUT"/*.log
exists() { [ "$(sql postgres "SELECT count(*) FROM pg_database WHERE datname = '$1'")" = 1 ]; }
if ! exists taskservice_scale_1m_uncompacted; then
	if ! exists taskservice_scale_1m; then
		log "building taskservice_scale_1m (several minutes)"
		DATABASE_URL="$(db taskservice)" "$BIN/taskbench" scale --sizes 1m --build-only
	fi
	log "keeping the uncompacted build as taskservice_scale_1m_uncompacted"
	sql postgres "ALTER DATABASE taskservice_scale_1m RENAME TO taskservice_scale_1m_uncompacted"
fi
log "copying taskservice_scale_1m_uncompacted to taskservice_scale_1m"
PGOPTIONS="-c client_min_messages=warning" sql postgres "DROP DATABASE IF EXISTS taskservice_scale_1m"
sql postgres "CREATE DATABASE taskservice_scale_1m TEMPLATE taskservice_scale_1m_uncompacted"
rm -rf "$ARCHIVE_DIR"; mkdir -p "$ARCHIVE_DIR"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
service() { # LOG [ENV...]: task-service on the copy, compacting
	local logf=$1; shift
	: >"$logf"
	env DATABASE_URL="$(db taskservice_scale_1m)" LISTEN_ADDR=127.0.0.1:0 JWT_SECRET=bench-compaction-0123456789abcdef \
		REACTORS=false EVENT_RETENTION=31d EVENT_COMPACTION_INTERVAL=1m DATA_DIR="$ARCHIVE_DIR" "$@" \
		"$BIN/task-service" >"$logf" 2>&1 &
	pids+=($!)
}
wait_for() { # LOG TEXT: until the log says TEXT
	until grep -q "$2" "$1"; do
		grep -q '"level":"error"' "$1" && die "task-service failed: $(grep '"level":"error"' "$1" | head -1)"
		sleep 1
	done
}
log "archiving the periods before the retention (EVENT_COMPACTION_SHARE=1: no rest)"
started=$SECONDS
service "$OUT/archive.log" EVENT_COMPACTION_SHARE=1
wait_for "$OUT/archive.log" 'archived the event log'
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
log "archived in $((SECONDS - started)) s: $(grep -o '"periods":[0-9]*\|"events":[0-9]*' "$OUT/archive.log" | head -2 | tr '\n' ' ')"
log_size() { sql taskservice_scale_1m "SELECT count(*) || ' rows, ' || pg_size_pretty((SELECT sum(pg_total_relation_size(inhrelid))
	FROM pg_inherits WHERE inhparent = 'task_events'::regclass)) FROM task_events"; }
before_size=$(log_size)

log "a lane all along (taskbench lanes --modes store+create --workers $LANE_WORKERS)"
: >"$OUT/lanes.log"
DATABASE_URL="$(db taskservice)" "$BIN/taskbench" lanes --modes store+create --workers "$LANE_WORKERS" --tasks "$lane_tasks" >>"$OUT/lanes.log" 2>&1 &
pids+=($!)
until grep -q 'timing' "$OUT/lanes.log"; do
	kill -0 "${pids[-1]}" 2>/dev/null || die "the lane stopped: $(tail -3 "$OUT/lanes.log")"
	sleep 1
done
sleep 5 # the lane at its pace
scale() { DATABASE_URL="$(db taskservice)" "$BIN/taskbench" scale --sizes 1m --calls "$CALLS" >"$OUT/scale$1.txt" 2>>"$OUT/scale.log"; echo "$1 $(uptime)" >>"$OUT/load.log"; }
log "reads before compaction"
scale 0
log "compacting: task-service with its defaults"
service "$OUT/service.log"
wait_for "$OUT/service.log" 'compacted finished chains'
for r in $(seq 1 "$RUNS"); do
	log "reads during compaction, run $r of $RUNS"
	scale "$r"
done
cleanup; pids=()

echo "task_events before: $before_size; after: $(log_size) (dead rows not yet vacuumed)"
echo "compacted: $(sql taskservice_scale_1m "SELECT tasks || ' tasks, ' || events || ' events deleted' FROM event_compaction")"
echo "the lane ($LANE_WORKERS workers, store+create) at the end: $(grep -o '[0-9]* tasks/s so far' "$OUT/lanes.log" | tail -1)"
echo "load average at each run:"; cat "$OUT/load.log"
# The writes taskbench scale times beside the reads (the heartbeat, a claim with its
# completion) are listed apart: the 20 ms target is the reads'.
over() {
	for f in "$OUT"/scale*.txt; do
		r=$(basename "$f" .txt); r=${r#scale}
		awk -v r="$r" -v w="$1" '/ \/ / && $NF+0 > 20 && (/^(POST |claim \+ complete)/ ? w : !w) { print "  run " r ": " $0 }' "$f"
	done
}
echo "reads over 20 ms at p99 (run 0: before compaction):"; over 0
echo "writes over 20 ms at p99:"; over 1
echo "tables: $OUT/scale*.txt"
