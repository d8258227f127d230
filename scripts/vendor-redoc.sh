#!/usr/bin/env bash
# Vendors Redoc's standalone bundle for the API reference page (/api/docs)
# from npm into api/reference/static/, with its licenses. Run it to move to
# another release; then update RedocVersion in api/reference/reference.go.
#
#   scripts/vendor-redoc.sh [VERSION]   (default 2.5.2)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
version="${1:-2.5.2}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "redoc@$version" >/dev/null && tar xzf "redoc-$version.tgz")
dest=api/reference/static
cp "$tmp/package/bundles/redoc.standalone.js" "$dest/redoc.standalone.js"
cp "$tmp/package/bundles/redoc.standalone.js.LICENSE.txt" "$dest/redoc.standalone.js.LICENSE.txt"
cp "$tmp/package/LICENSE" "$dest/redoc-LICENSE.txt"
echo "vendored redoc $version into $dest; set RedocVersion = \"$version\" in api/reference/reference.go"
