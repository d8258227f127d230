#!/bin/sh
# Claude Code headless that resumes its session from the task's checkpoint.
#
# The first attempt picks its session id up front (--session-id) and writes it
# to $TASK_CHECKPOINT at once, so even a worker killed mid-task leaves it
# behind (task-worker uploads the file as it changes). A later attempt (the
# retry after a crash or a failure, or the task claimed again after a
# release) finds {"session_id": ...} there and resumes that session
# (--resume). When Claude exits, the session_id of its JSON output is saved
# again: a resumed session may continue under a new id.
#
# Use it as a type's command in the config file, e.g.
#   "types": {"fix_bug": {"command": "exec /etc/task-worker/claude-resume.sh"}}
# CLAUDE_FLAGS adds flags (permissions, tools, turns).
set -u
out="$TASK_DIR/claude-output.json"
session=$(sed -n 's/.*"session_id": *"\([^"]*\)".*/\1/p' "$TASK_CHECKPOINT" | head -n 1)
if [ -n "$session" ]; then
  echo "resuming Claude Code session $session"
  set -- --resume "$session"
else
  session=$(cat /proc/sys/kernel/random/uuid)
  printf '{"session_id": "%s"}\n' "$session" > "$TASK_CHECKPOINT"
  set -- --session-id "$session"
fi
# The prompt (on stdin, and in $TASK_PROMPT_FILE) says what to do; for a
# resumed session it also carries the checkpoint and the previous attempts.
# shellcheck disable=SC2086 # CLAUDE_FLAGS is a list of flags
claude -p "$@" --output-format json ${CLAUDE_FLAGS:---permission-mode acceptEdits --max-turns 60} \
  < "$TASK_PROMPT_FILE" > "$out"
status=$?
latest=$(sed -n 's/.*"session_id": *"\([^"]*\)".*/\1/p' "$out" | head -n 1)
if [ -n "$latest" ]; then
  printf '{"session_id": "%s"}\n' "$latest" > "$TASK_CHECKPOINT"
fi
# The last JSON line on stdout is the result (and its LLM usage) for task-worker.
cat "$out"
exit $status
