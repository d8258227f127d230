#!/usr/bin/env bash
# s3dev.sh — a real S3-compatible server for development and tests: versitygw
# (github.com/versity/versitygw, Apache-2.0) on its POSIX backend.
#
#   scripts/s3dev.sh [binary|start|stop|env]     (default: binary)
#
#   binary  build versitygw once into the cache directory (outside the repository)
#           with `go install` from the Go module proxy, and print the binary's path
#   start   start it on 127.0.0.1:$S3DEV_PORT with its data in .s3dev/ at the
#           repository root (the bucket $S3DEV_BUCKET is a directory there) and print
#           the environment task-service needs (DATA_S3_* and AWS_* lines)
#   stop    stop the server started by `start`
#   env     print that environment without starting anything
#
# stdout carries only the path (or the environment); progress goes to stderr. The tests
# (store/blob/s3test) call `binary` and start their own server on a free port with its
# data in a temporary directory, so they need nothing running.
#
# Environment:
#   S3DEV_CACHE   where the binary is built (default ${XDG_CACHE_HOME:-~/.cache}/task-service)
#   S3DEV_PORT    port for `start` (default 57070)
#   S3DEV_BUCKET  bucket for `start` (default task-data)
#
# Needs only Go (the same toolchain that builds the service) and network access to the
# Go module proxy on first use; the build takes about two minutes on 2 cores.
set -euo pipefail

VERSION="v1.8.0"
CACHE="${S3DEV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/task-service}"
BIN="$CACHE/versitygw-$VERSION/versitygw"
PORT="${S3DEV_PORT:-57070}"
BUCKET="${S3DEV_BUCKET:-task-data}"
ACCESS="s3dev-access-key"
SECRET="s3dev-secret-key-0123456789"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
DATA="$REPO/.s3dev"

log() { printf 's3dev: %s\n' "$*" >&2; }
die() { printf 's3dev: error: %s\n' "$*" >&2; exit 1; }

build() {
	[[ -x "$BIN" ]] && return 0
	command -v go >/dev/null || die "go is not installed; install Go (see .ci/run), then run this again"
	log "building versitygw $VERSION into $(dirname "$BIN") (once; about two minutes)"
	mkdir -p "$(dirname "$BIN")"
	local tmp
	tmp="$(mktemp -d)"
	# Outside the repository so that go.mod of task-service is not involved.
	if ! (cd "$tmp" && GOFLAGS=-buildvcs=false GOBIN="$tmp/bin" go install "github.com/versity/versitygw/cmd/versitygw@$VERSION") >&2; then
		rm -rf "$tmp"
		die "go install github.com/versity/versitygw/cmd/versitygw@$VERSION failed (output above); check access to the Go module proxy ($(go env GOPROXY))"
	fi
	mv "$tmp/bin/versitygw" "$BIN"
	rm -rf "$tmp"
}

print_env() {
	cat <<ENV
DATA_S3_BUCKET=$BUCKET
DATA_S3_ENDPOINT=http://127.0.0.1:$PORT
DATA_S3_REGION=us-east-1
DATA_S3_PATH_STYLE=true
AWS_ACCESS_KEY_ID=$ACCESS
AWS_SECRET_ACCESS_KEY=$SECRET
ENV
}

cmd="${1:-binary}"
case "$cmd" in
binary)
	build
	echo "$BIN"
	;;
env) print_env ;;
start)
	build
	mkdir -p "$DATA/root/$BUCKET"
	if [[ -f "$DATA/pid" ]] && kill -0 "$(cat "$DATA/pid")" 2>/dev/null; then
		log "already running (pid $(cat "$DATA/pid"))"
	else
		log "starting versitygw on 127.0.0.1:$PORT, data in $DATA/root, log in $DATA/log"
		nohup "$BIN" --port "127.0.0.1:$PORT" --access "$ACCESS" --secret "$SECRET" --quiet \
			posix "$DATA/root" >"$DATA/log" 2>&1 &
		echo $! >"$DATA/pid"
		for _ in $(seq 50); do
			(echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
			sleep 0.1
		done
		(echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || die "versitygw did not start; see $DATA/log"
	fi
	print_env
	;;
stop)
	if [[ -f "$DATA/pid" ]]; then
		kill "$(cat "$DATA/pid")" 2>/dev/null || true
		rm -f "$DATA/pid"
		log "stopped"
	fi
	;;
-h | --help | help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2 ;;
*) die "unknown command '$cmd' (usage: $0 [binary|start|stop|env])" ;;
esac
