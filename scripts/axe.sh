#!/usr/bin/env bash
# axe.sh — make sure axe-core is there for the admin UI's accessibility test
# (cmd/task-service/browser_axe_test.go, TestBrowserAccessibility).
#
#   scripts/axe.sh          install axe-core (npm, a pinned version) into a cache
#                           directory when missing; print the path of axe.min.js
#
# stdout carries only the path; progress goes to stderr, so
#   AXE_JS="$(scripts/axe.sh)"
# works. The package goes to AXE_DIR (default ~/.cache/task-service/axe-core-VERSION),
# outside the repository. Node.js and npm come from Debian's packages when missing.
# AXE_JS, when set to a file, is used as it is.
set -euo pipefail

VERSION=4.14.1
log() { printf 'axe: %s\n' "$*" >&2; }

if [[ -n "${AXE_JS:-}" ]]; then
	[[ -f "$AXE_JS" ]] || { log "AXE_JS=$AXE_JS is not a file"; exit 1; }
	echo "$AXE_JS"
	exit 0
fi
dir="${AXE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/task-service/axe-core-$VERSION}"
js="$dir/node_modules/axe-core/axe.min.js"
if [[ -f "$js" ]]; then
	echo "$js"
	exit 0
fi

"$(dirname "${BASH_SOURCE[0]}")/npm-package.sh" "$dir" "axe-core@$VERSION"
[[ -f "$js" ]] || { log "axe-core@$VERSION installed into $dir without $js"; exit 1; }
echo "$js"
