#!/usr/bin/env bash
# Lints the OpenAPI document with Redocly CLI (its recommended rules): zero
# errors or this fails. Redocly is an npm package; it is installed once, at a
# pinned version, into a cache directory outside the repository
# (REDOCLY_DIR, default ~/.cache/task-service/redocly-VERSION). Node.js and
# npm come from Debian's packages when missing.
#
#   scripts/redocly.sh [openapi.json]   (default: the document `task-service openapi` prints)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VERSION=1.34.20 # the 1.x line runs on Debian 12's Node.js 18; 2.x needs Node 20
dir="${REDOCLY_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/task-service/redocly-$VERSION}"

scripts/npm-package.sh "$dir" "@redocly/cli@$VERSION"

doc="${1:-}"
if [[ -z "$doc" ]]; then
	doc="$(mktemp --suffix=.json)"
	trap 'rm -f "$doc"' EXIT
	go run ./cmd/task-service openapi >"$doc"
fi
# --config: the rules the document is held to (recommended, plus ours).
REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
	"$dir/node_modules/.bin/redocly" lint --config api/redocly.yaml --format=stylish "$doc"
