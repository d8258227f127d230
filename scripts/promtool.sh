#!/usr/bin/env bash
# promtool.sh — make sure promtool is there for the alerting rules' unit tests
# (docs/ops/alerts_test.yml) and `promtool check metrics` on a scrape (make test).
#
#   scripts/promtool.sh          install Debian's prometheus package (it ships promtool)
#                                when promtool is missing; print its path
#
# stdout carries only the path; progress goes to stderr, so
#   PROMTOOL="$(scripts/promtool.sh)"
# works. As root it runs apt-get itself, otherwise through sudo; with neither it says
# exactly what to install. PROMTOOL, when set to an executable, is used as it is.
# The package's prometheus server is installed too, but not started: its service is
# masked before the install (policy-rc.d), so nothing listens on :9090 afterwards.
set -euo pipefail

log() { printf 'promtool: %s\n' "$*" >&2; }

if [[ -n "${PROMTOOL:-}" ]]; then
	[[ -x "$PROMTOOL" ]] || { log "PROMTOOL=$PROMTOOL is not an executable"; exit 1; }
	echo "$PROMTOOL"
	exit 0
fi
if path="$(command -v promtool)"; then
	echo "$path"
	exit 0
fi

SUDO=""
if [[ $EUID -ne 0 ]]; then
	if command -v sudo >/dev/null; then
		SUDO="sudo"
	else
		log "promtool is missing and this user cannot install it."
		log "install it as root:  apt-get install -y --no-install-recommends prometheus   (Debian 12; or set PROMTOOL to a promtool binary)"
		exit 1
	fi
fi
if ! command -v apt-get >/dev/null; then
	log "promtool is missing and this is not a Debian-like system: install Prometheus' promtool and set PROMTOOL to it"
	exit 1
fi
log "installing Debian's prometheus package (for promtool)"
# Keep the package's server from starting: we only want the tool.
policy=/usr/sbin/policy-rc.d
added_policy=0
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
	$SUDO chmod +x "$policy"
	added_policy=1
fi
cleanup() { if ((added_policy)); then $SUDO rm -f "$policy"; fi; }
trap cleanup EXIT
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update >&2
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >&2
command -v promtool
