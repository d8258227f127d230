#!/usr/bin/env bash
# devdb.sh — a private PostgreSQL 15 cluster for development and tests.
#
#   scripts/devdb.sh [start|stop|status|url]     (default: start)
#
#   start   start the cluster if it is not running (initialising it on first use),
#           create the database "taskservice" if missing, print its URL
#   stop    stop the cluster (fast shutdown)
#   status  print "running" or "stopped" (exit 0 / 3)
#   url     print the URL without starting anything
#
# stdout carries only the URL (or the status word); all progress goes to stderr, so
#   DATABASE_URL="$(scripts/devdb.sh)"
# works.
#
# Environment:
#   DEVDB_PORT   TCP port on 127.0.0.1 (default 55432)
#   PGBIN        PostgreSQL server binaries (default /usr/lib/postgresql/15/bin)
#
# Data lives in .devdb/ at the repository root. PostgreSQL refuses to run as root, so
# when this script runs as root the cluster is owned by and run as the "postgres" user.
# If that user cannot reach the repository (a parent directory not traversable by it),
# the data goes to /tmp/task-service-devdb-<hash of repo path>/ and .devdb is a symlink
# to it.
#
# fsync and synchronous_commit stay on: benchmarks run against this cluster and must
# pay the real cost of durable commits.
set -euo pipefail

PGBIN="${PGBIN:-/usr/lib/postgresql/15/bin}"
PORT="${DEVDB_PORT:-55432}"
DBNAME="taskservice"
DBUSER="postgres"
URL="postgres://${DBUSER}@127.0.0.1:${PORT}/${DBNAME}?sslmode=disable"

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
LINK="$REPO/.devdb"

log() { printf 'devdb: %s\n' "$*" >&2; }
die() { printf 'devdb: error: %s\n' "$*" >&2; exit 1; }

cmd="${1:-start}"
case "$cmd" in
start | stop | status | url) ;;
-h | --help | help)
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
	exit 0
	;;
*) die "unknown command '$cmd' (usage: $0 [start|stop|status|url])" ;;
esac

if [[ "$cmd" == url ]]; then
	echo "$URL"
	exit 0
fi

case "$PORT" in
'' | *[!0-9]*) die "DEVDB_PORT must be a number, got '$PORT'" ;;
esac

# --- who runs the server -------------------------------------------------------------
if [[ $EUID -eq 0 ]]; then
	AS_ROOT=1
	RUN_USER=postgres
	# cd /: the postgres user may not be allowed into the current directory.
	as_pg() { (cd / && runuser -u postgres -- "$@"); }
else
	AS_ROOT=0
	RUN_USER="$(id -un)"
	as_pg() { "$@"; }
fi

# --- make sure the server binaries are installed -------------------------------------
ensure_installed() {
	[[ -x "$PGBIN/initdb" && -x "$PGBIN/pg_ctl" ]] && return 0
	if [[ $AS_ROOT -eq 1 && "$PGBIN" == /usr/lib/postgresql/15/bin ]]; then
		log "PostgreSQL 15 not found; installing postgresql-15 with apt-get"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update >&2
		apt-get install -y --no-install-recommends postgresql-15 >&2
		[[ -x "$PGBIN/initdb" ]] || die "postgresql-15 installed but $PGBIN/initdb is missing"
	else
		cat >&2 <<EOF
devdb: error: PostgreSQL 15 server binaries not found in $PGBIN.
Install them, e.g. on Debian/Ubuntu:
    sudo apt-get update && sudo apt-get install -y postgresql-15
or point PGBIN at a directory containing initdb, pg_ctl, pg_isready and psql of PostgreSQL 15.
EOF
		exit 1
	fi
}

# --- where the data lives ------------------------------------------------------------
# STATE contains: data/ (PGDATA, mode 700), run/ (unix socket), lock (flock).
resolve_state_dir() {
	local hash fallback
	hash="$(printf '%s' "$REPO" | sha256sum | cut -c1-12)"
	fallback="/tmp/task-service-devdb-$hash"

	if [[ -L "$LINK" ]]; then
		# An earlier run chose the /tmp location; /tmp may have been wiped since.
		STATE="$(readlink "$LINK")"
		return
	fi
	if [[ -d "$LINK" ]]; then
		STATE="$LINK"
		return
	fi
	[[ -e "$LINK" ]] && die "$LINK exists and is not a directory"

	# Fresh: use .devdb in the repo unless the server user cannot reach it, or the
	# socket path would exceed the unix-socket path limit (~107 bytes).
	local use_tmp=0
	if [[ $AS_ROOT -eq 1 ]] && ! runuser -u postgres -- test -x "$REPO"; then
		log "user postgres cannot traverse to $REPO; keeping data in $fallback (.devdb is a symlink)"
		use_tmp=1
	elif ((${#LINK} + ${#PORT} + 20 > 100)); then
		log "repository path too long for a unix socket; keeping data in $fallback (.devdb is a symlink)"
		use_tmp=1
	fi
	if [[ $use_tmp -eq 1 ]]; then
		ln -s "$fallback" "$LINK"
		STATE="$fallback"
	else
		mkdir -p "$LINK"
		STATE="$LINK"
	fi
}

prepare_state_dir() {
	if [[ "$STATE" == /tmp/* && ! -d "$STATE" ]]; then
		# Create it ourselves with a safe mode; refuse a foreign pre-existing one below.
		mkdir -m 700 "$STATE"
	fi
	[[ -d "$STATE" ]] || die "$STATE is not a directory"
	if [[ "$STATE" == /tmp/* && "$(stat -c %u "$STATE")" != "$(id -u "$RUN_USER")" && "$(stat -c %u "$STATE")" != 0 ]]; then
		die "$STATE is owned by someone else; remove it or the $LINK symlink"
	fi
	mkdir -p "$STATE/run"
	if [[ $AS_ROOT -eq 1 ]]; then
		chown postgres: "$STATE" "$STATE/run"
	fi
	chmod 700 "$STATE"
}

PGDATA_DIR() { echo "$STATE/data"; }

# --- is our server up? ---------------------------------------------------------------
# Exit 0 when something accepts connections on 127.0.0.1:$PORT.
port_ready() {
	"$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -d postgres -U "$DBUSER" -t 1 >/dev/null 2>&1
}

# Queries the server on $PORT; prints "<data_directory>|<yes/no: database exists>".
probe() {
	"$PGBIN/psql" -X -q -A -t -w -h 127.0.0.1 -p "$PORT" -U "$DBUSER" -d postgres \
		-c "select current_setting('data_directory') || '|' || case when exists(select 1 from pg_database where datname = '$DBNAME') then 'yes' else 'no' end" 2>/dev/null
}

# Ensures the server on $PORT is ours and the database exists; prints the URL.
finish() {
	local out dir has
	out="$(probe)" || die "cannot query the server on 127.0.0.1:$PORT"
	dir="${out%|*}"
	has="${out##*|}"
	if [[ "$(realpath -m "$dir")" != "$(realpath -m "$STATE/data")" ]]; then
		die "port $PORT is served by another PostgreSQL cluster (data directory $dir); set DEVDB_PORT to a free port"
	fi
	if [[ "$has" != yes ]]; then
		log "creating database $DBNAME"
		"$PGBIN/psql" -X -q -w -h 127.0.0.1 -p "$PORT" -U "$DBUSER" -d postgres \
			-v ON_ERROR_STOP=1 -c "create database $DBNAME" >&2 ||
			probe | grep -q '|yes$' || die "could not create database $DBNAME"
	fi
	echo "$URL"
}

init_cluster() {
	local data="$STATE/data"
	log "initialising a new cluster in $data"
	if [[ -e "$data" ]]; then
		# A half-finished initdb from an interrupted run: start over.
		rm -rf "$data"
	fi
	as_pg "$PGBIN/initdb" -D "$data" --auth=trust -U "$DBUSER" -E UTF8 --locale=C.UTF-8 >"$STATE/initdb.log" 2>&1 ||
		{ cat "$STATE/initdb.log" >&2; die "initdb failed"; }
	# Settings for a dev/test box. Port and socket directory go to devdb.conf, which
	# is rewritten on every start, so DEVDB_PORT can change without re-initialising.
	as_pg tee -a "$data/postgresql.conf" >/dev/null <<'EOF'

# ---- scripts/devdb.sh ----------------------------------------------------------------
listen_addresses = '127.0.0.1'
max_connections = 300
shared_buffers = 512MB
# Durability stays on: benchmarks must pay for real commits.
fsync = on
synchronous_commit = on
full_page_writes = on
max_wal_size = 2GB
# Server log is written by pg_ctl -l to server.log in the data directory.
logging_collector = off
log_line_prefix = '%m [%p] %q%u@%d '
log_min_messages = warning
log_min_error_statement = error
include_if_exists = 'devdb.conf'
EOF
}

start_server() {
	local data="$STATE/data" logf
	logf="$data/server.log"
	# Keep the log from growing without bound across many dev sessions.
	if [[ -f "$logf" ]] && (($(stat -c %s "$logf") > 100 * 1024 * 1024)); then
		mv -f "$logf" "$logf.1"
	fi
	as_pg tee "$data/devdb.conf" >/dev/null <<EOF
# Written by scripts/devdb.sh on every start; do not edit.
port = $PORT
unix_socket_directories = '$STATE/run'
EOF
	log "starting PostgreSQL on 127.0.0.1:$PORT (data $data, log $logf)"
	# 9>&-: the postmaster must not inherit the lock descriptor, or it would hold the
	# start lock for as long as it runs.
	if ! as_pg "$PGBIN/pg_ctl" -D "$data" -l "$logf" -w -t 60 start >/dev/null 2>"$STATE/pg_ctl.err" 9>&-; then
		cat "$STATE/pg_ctl.err" >&2
		log "last lines of $logf:"
		tail -n 20 "$logf" >&2 || true
		die "PostgreSQL did not start"
	fi
	local i
	for ((i = 0; i < 100; i++)); do
		port_ready && return 0
		sleep 0.1
	done
	die "PostgreSQL started but 127.0.0.1:$PORT does not accept connections; see $logf"
}

do_start() {
	# Fast path: already running.
	if port_ready; then
		finish
		return
	fi
	ensure_installed
	prepare_state_dir
	# Serialise concurrent starts (e.g. two `make test` at once).
	exec 9>"$STATE/lock"
	flock -w 120 9 || die "timed out waiting for another devdb.sh holding $STATE/lock"
	if ! port_ready; then
		if [[ ! -f "$STATE/data/PG_VERSION" ]]; then
			init_cluster
		fi
		local v
		v="$(cat "$STATE/data/PG_VERSION")"
		[[ "$v" == 15 ]] || die "$STATE/data holds a PostgreSQL $v cluster, expected 15; remove it to start over"
		start_server
	fi
	finish
	exec 9>&-
}

do_stop() {
	if [[ ! -f "$STATE/data/PG_VERSION" ]]; then
		log "no cluster in $STATE/data"
		return 0
	fi
	if [[ ! -f "$STATE/data/postmaster.pid" ]]; then
		log "not running"
		return 0
	fi
	log "stopping PostgreSQL (data $STATE/data)"
	as_pg "$PGBIN/pg_ctl" -D "$STATE/data" -m fast -w -t 60 stop >&2
}

do_status() {
	if [[ -f "$STATE/data/PG_VERSION" ]] && as_pg "$PGBIN/pg_ctl" -D "$STATE/data" status >/dev/null 2>&1; then
		echo running
		log "$URL (data $STATE/data)"
		return 0
	fi
	echo stopped
	return 3
}

case "$cmd" in
start)
	if port_ready; then
		# Fast path without touching the file system; finish() checks ownership.
		STATE="$(if [[ -L "$LINK" ]]; then readlink "$LINK"; else echo "$LINK"; fi)"
		finish
		exit 0
	fi
	resolve_state_dir
	do_start
	;;
stop)
	[[ -e "$LINK" || -L "$LINK" ]] || { log "no cluster (no $LINK)"; exit 0; }
	resolve_state_dir
	do_stop
	;;
status)
	[[ -e "$LINK" || -L "$LINK" ]] || { echo stopped; exit 3; }
	resolve_state_dir
	do_status
	;;
esac
