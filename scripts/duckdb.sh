#!/usr/bin/env bash
# duckdb.sh — run one SQL query in DuckDB, in DIR, and print its rows as JSON
# (an array of objects). The event archive's test uses it to show that an
# archive object is read as it is, without task-service:
#
#   scripts/duckdb.sh DIR "SELECT type, count(*) AS n FROM read_json_auto('events/day/2026-11-20.jsonl.gz') GROUP BY type"
#
# DuckDB comes from npm (@duckdb/node-api, pinned; its native engine is in the
# package), installed once into DUCKDB_DIR (default
# ~/.cache/task-service/duckdb-VERSION), outside the repository; Node.js and
# npm come from Debian's packages when missing.
set -euo pipefail

PACKAGE=@duckdb/node-api@1.5.6-r.1
log() { printf 'duckdb: %s\n' "$*" >&2; }

if [[ $# -ne 2 ]]; then
	echo "usage: scripts/duckdb.sh DIR QUERY" >&2
	exit 2
fi

dir="${DUCKDB_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/task-service/duckdb-$(echo "$PACKAGE" | tr '/@' '_-')}"
"$(dirname "${BASH_SOURCE[0]}")/npm-package.sh" "$dir" "$PACKAGE"
cat >"$dir/query.mjs" <<'JS'
import { DuckDBInstance } from '@duckdb/node-api';
const db = await DuckDBInstance.create(':memory:');
const conn = await db.connect();
const result = await conn.runAndReadAll(process.argv[2]);
console.log(JSON.stringify(result.getRowObjectsJson()));
JS
cd "$1"
node "$dir/query.mjs" "$2"
