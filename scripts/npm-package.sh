#!/usr/bin/env bash
# npm-package.sh — install pinned npm packages once into DIR, outside the
# repository, for the scripts that need a Node.js tool (tsclient.sh,
# redocly.sh, axe.sh, duckdb.sh). Node.js and npm come from Debian's packages
# when missing. Progress goes to stderr.
#
#   scripts/npm-package.sh DIR PACKAGE@VERSION...
set -euo pipefail

if [[ $# -lt 2 ]]; then
	echo "usage: scripts/npm-package.sh DIR PACKAGE@VERSION..." >&2
	exit 2
fi
dir="$1"
shift
log() { printf 'npm-package: %s\n' "$*" >&2; }

# The packages a finished install put there; anything else installs again.
if [[ -f "$dir/.installed" && "$(cat "$dir/.installed")" == "$*" ]]; then
	exit 0
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
	sudo=""
	[[ $EUID -ne 0 ]] && sudo="sudo"
	log "installing nodejs and npm (Debian packages)"
	if ! { $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs npm; } >&2; then
		log "could not install Node.js; install nodejs (18 or later) and npm, then run again"
		exit 1
	fi
fi
log "installing $* into $dir"
mkdir -p "$dir"
if ! npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$@" >&2; then
	log "could not install $* from the npm registry (is it reachable? npm config get registry)"
	exit 1
fi
echo "$*" >"$dir/.installed"
