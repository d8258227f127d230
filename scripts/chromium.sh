#!/usr/bin/env bash
# chromium.sh — make sure a headless Chromium is there for the admin UI's browser tests
# (cmd/task-service/browser_test.go) and `make screenshots`.
#
#   scripts/chromium.sh          install Debian's chromium when it is missing; print its path
#
# stdout carries only the path; progress goes to stderr, so
#   CHROMIUM="$(scripts/chromium.sh)"
# works. As root it runs apt-get itself, otherwise through sudo; with neither it says
# exactly what to install. CHROMIUM, when set to an executable, is used as it is.
set -euo pipefail

log() { printf 'chromium: %s\n' "$*" >&2; }

if [[ -n "${CHROMIUM:-}" ]]; then
	[[ -x "$CHROMIUM" ]] || { log "CHROMIUM=$CHROMIUM is not an executable"; exit 1; }
	echo "$CHROMIUM"
	exit 0
fi
for name in chromium chromium-browser google-chrome; do
	if path="$(command -v "$name")"; then
		echo "$path"
		exit 0
	fi
done

SUDO=""
if [[ $EUID -ne 0 ]]; then
	if command -v sudo >/dev/null; then
		SUDO="sudo"
	else
		log "chromium is missing and this user cannot install it."
		log "install it as root:  apt-get install -y chromium   (Debian 12; or set CHROMIUM to a Chrome binary)"
		exit 1
	fi
fi
if ! command -v apt-get >/dev/null; then
	log "chromium is missing and this is not a Debian-like system: install Chromium or Chrome and set CHROMIUM to it"
	exit 1
fi
log "installing Debian's chromium (apt-get install chromium; about 100 MB, once)"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2
command -v chromium
