#!/usr/bin/env bash
# tsclient.sh — drive a task's lifecycle through a TypeScript client generated
# from the document a running task-service serves (api/tsclient/lifecycle.ts;
# the Go test TestTypeScriptClientLifecycle runs it against a real server).
#
#   scripts/tsclient.sh BASE_URL ADMIN_EMAIL ADMIN_PASSWORD
#
# Steps: fetch BASE_URL/api/v1/openapi.json; generate its types with
# openapi-typescript; compile lifecycle.ts against them with tsc --strict (a
# document a client cannot use fails here); run it with node (openapi-fetch
# makes the calls). The npm packages are pinned and installed once into
# TSCLIENT_DIR (default ~/.cache/task-service/tsclient-VERSIONS), outside the
# repository; Node.js and npm come from Debian's packages when missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PACKAGES=(openapi-typescript@7.13.0 openapi-fetch@0.17.0 typescript@5.9.3)
log() { printf 'tsclient: %s\n' "$*" >&2; }

if [[ $# -ne 3 ]]; then
	echo "usage: scripts/tsclient.sh BASE_URL ADMIN_EMAIL ADMIN_PASSWORD" >&2
	exit 2
fi
base="$1"

dir="${TSCLIENT_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/task-service/tsclient-$(echo "${PACKAGES[*]}" | tr ' @' '_-')}"
scripts/npm-package.sh "$dir" "${PACKAGES[@]}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
curl -fsS -o "$work/openapi.json" "$base/api/v1/openapi.json"
"$dir/node_modules/.bin/openapi-typescript" "$work/openapi.json" -o "$work/schema.d.ts" >&2
cp api/tsclient/lifecycle.ts "$work/"
ln -s "$dir/node_modules" "$work/node_modules"
echo '{"type":"module"}' >"$work/package.json"
cat >"$work/tsconfig.json" <<'JSON'
{"compilerOptions": {"strict": true, "target": "es2022", "module": "es2022", "moduleResolution": "bundler",
  "outDir": "out", "skipLibCheck": true, "noEmitOnError": true, "lib": ["es2022", "dom"]},
 "files": ["lifecycle.ts"]}
JSON
if ! "$dir/node_modules/.bin/tsc" -p "$work/tsconfig.json" >&2; then
	log "lifecycle.ts does not compile against the generated types (above): the document changed under it"
	exit 1
fi
node "$work/out/lifecycle.js" "$@"
