#!/bin/sh
# An example task-worker command: a shell script. task-worker runs it once per
# task with sh -c, in its own process group, with the prompt on stdin (unused
# here) and TASK_* variables set. See docs/examples/README.md.
#
#   stdout  each line becomes a task update (batched); the last line that is a
#           JSON object is the result, unless $TASK_RESULT_FILE is written
#   stderr  its last 2 KB become the failure reason when the script exits non-zero
#   exit    0 = completed, anything else = failed
set -eu

echo "starting $TASK_TYPE task $TASK_ID (attempt $TASK_ATTEMPT): $TASK_TITLE"

# Params arrive as a JSON file. jq reads them if it is installed; this
# example falls back to sed for one flat string field.
param() {
	if command -v jq >/dev/null 2>&1; then
		jq -r --arg k "$1" '.[$k] // empty' "$TASK_PARAMS_FILE"
	else
		sed -n "s/.*\"$1\": *\"\\([^\"]*\\)\".*/\\1/p" "$TASK_PARAMS_FILE" | head -n 1
	fi
}

case "$TASK_TYPE" in
disk_usage)
	path=$(param path)
	[ -n "$path" ] || { echo "params.path is required" >&2; exit 2; }
	[ -d "$path" ] || { echo "no such directory: $path" >&2; exit 3; }
	echo "measuring $path"
	du -x -k -d "${DU_MAX_DEPTH:-1}" "$path" 2>/dev/null | sort -rn | head -n 20
	total=$(du -x -s -k "$path" 2>/dev/null | cut -f1)
	# The result file wins over stdout; any JSON value works.
	printf '{"path":"%s","total_kib":%s}\n' "$path" "$total" > "$TASK_RESULT_FILE"
	;;
*)
	echo "this script does not know task type '$TASK_TYPE'" >&2
	exit 64
	;;
esac

# A command may also call the API itself with the worker's token, e.g. to
# post an update immediately instead of through stdout:
if command -v curl >/dev/null 2>&1; then
	curl -fsS -X POST "$TASK_API/api/v1/worker/tasks/$TASK_ID/updates" \
		-H "Authorization: Bearer $TASK_TOKEN" -H 'Content-Type: application/json' \
		-d '{"message":"posted directly by handle-task.sh"}' >/dev/null || true
fi
echo "done"
