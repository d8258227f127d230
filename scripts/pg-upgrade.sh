#!/usr/bin/env bash
# pg-upgrade.sh — the steps of docs/deploy.md, "Upgrading PostgreSQL", with pg_upgrade:
# a new cluster from the stopped old one, its transaction counter kept (the consumers'
# positions are transaction ids), and the statistics rebuilt. Each step is timed.
#
#   scripts/pg-upgrade.sh OLD_DATA NEW_DATA [pg_upgrade flags, e.g. --link or --jobs 4]
#
# Run it as the clusters' owner (postgres), with every task-service replica and the old
# server stopped. NEW_DATA is made with initdb when it does not exist (INITDB_FLAGS; the
# encoding and locale must be the old cluster's). At the end the new cluster is stopped:
# start it as the old one was (its settings are not copied), then the replicas.
#
# Environment:
#   OLD_BIN       the old major's programs (default /usr/lib/postgresql/<OLD_DATA's major>/bin)
#   NEW_BIN       the new major's programs (default: the newest under /usr/lib/postgresql)
#   PGUSER        the clusters' superuser (default postgres)
#   INITDB_FLAGS  for the new cluster (default: -E UTF8 --auth=trust)
#   UPGRADE_PORT  a free port for the servers pg_upgrade and the analysis start (default 50432)
#   ANALYZE       0 skips `vacuumdb --all --analyze-in-stages` (run it after the start instead)
set -euo pipefail

log() { printf 'pg-upgrade: %s\n' "$*" >&2; }
[[ $# -ge 2 ]] || { log "usage: $0 OLD_DATA NEW_DATA [pg_upgrade flags]"; exit 2; }
old=$(realpath "$1")
new=$(realpath -m "$2")
shift 2
[[ -f $old/PG_VERSION ]] || { log "$old is not a PostgreSQL data directory"; exit 2; }
[[ ! -f $old/postmaster.pid ]] || { log "the old server is running ($old/postmaster.pid): stop it (pg_ctl stop -m fast) and every replica first"; exit 2; }
OLD_BIN=${OLD_BIN:-/usr/lib/postgresql/$(cat "$old/PG_VERSION")/bin}
NEW_BIN=${NEW_BIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
PGUSER=${PGUSER:-postgres}
port=${UPGRADE_PORT:-50432}
export PGUSER

step_start=0
step() { step_name=$1; step_start=$(date +%s.%N); log "$step_name ..."; }
done_step() { log "$step_name: $(awk -v a="$step_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }')"; }
next_xid() { "$1/pg_controldata" "$2" | sed -n "s/^Latest checkpoint's NextXID: *//p"; }

log "old: $old ($OLD_BIN, PostgreSQL $(cat "$old/PG_VERSION")); new: $new ($NEW_BIN)"
old_next=$(next_xid "$OLD_BIN" "$old")

if [[ ! -e $new ]]; then
	step "initdb"
	# shellcheck disable=SC2086 # INITDB_FLAGS is a list of flags
	"$NEW_BIN/initdb" -D "$new" -U "$PGUSER" ${INITDB_FLAGS:--E UTF8 --auth=trust} >/dev/null
	done_step
fi

# pg_upgrade writes its logs and delete_old_cluster.sh where it runs, and puts the
# servers' sockets there.
cd "$(dirname "$new")"
step "pg_upgrade --check"
"$NEW_BIN/pg_upgrade" --check -b "$OLD_BIN" -B "$NEW_BIN" -d "$old" -D "$new" -p "$port" -P "$port" -U "$PGUSER" "$@" >&2
done_step
step "pg_upgrade${*:+ $*}"
"$NEW_BIN/pg_upgrade" -b "$OLD_BIN" -B "$NEW_BIN" -d "$old" -D "$new" -p "$port" -P "$port" -U "$PGUSER" "$@" >&2
done_step

# The consumers' positions are transaction ids: the new counter must go on from the old.
new_next=$(next_xid "$NEW_BIN" "$new")
log "next transaction id (epoch:xid): old $old_next, new $new_next"
IFS=: read -r oe ox <<<"$old_next"
IFS=: read -r ne nx <<<"$new_next"
if ((ne < oe || (ne == oe && nx < ox))); then
	log "the new cluster's transaction counter is behind the old one's: do not start task-service on it"
	exit 1
fi

if [[ ${ANALYZE:-1} != 0 ]]; then
	step "vacuumdb --all --analyze-in-stages"
	"$NEW_BIN/pg_ctl" start -w -t 600 -D "$new" -l "$(dirname "$new")/pg-upgrade-analyze.log" \
		-o "-c port=$port -c listen_addresses='' -c unix_socket_directories='$PWD'" >/dev/null
	trap '"$NEW_BIN/pg_ctl" stop -w -m fast -D "$new" >/dev/null' EXIT
	"$NEW_BIN/vacuumdb" -h "$PWD" -p "$port" --all --analyze-in-stages >&2
	"$NEW_BIN/pg_ctl" stop -w -m fast -D "$new" >/dev/null
	trap - EXIT
	done_step
fi
log "done: start the new cluster from $new with the old one's settings, then the task-service replicas"
