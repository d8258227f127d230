package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// claimedTask is a claimed task as the service sent it. The typed part
// comes from store.TaskWithType; previous attempts are decoded loosely from
// the raw JSON (this field shadows the typed one), because servers may or
// may not send them and their shape may grow: a prompt must never be lost
// to a decoding error.
type claimedTask struct {
	store.TaskWithType
	PreviousAttemptsRaw json.RawMessage   `json:"previous_attempts"`
	PreviousAttempts    []json.RawMessage `json:"-"`
	// Inputs are the task's dependencies' results and files ({ref, task_id,
	// result, files}), decoded loosely for the same reason.
	InputsRaw json.RawMessage   `json:"inputs"`
	Inputs    []json.RawMessage `json:"-"`

	claimedAt time.Time     // when the claim's answer arrived
	claimTook time.Duration // how long the claim request took
}

func decodeClaim(raw json.RawMessage) (*claimedTask, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var t claimedTask
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("decode claimed task: %w", err)
	}
	if t.ID == "" {
		return nil, fmt.Errorf("decode claimed task: no id in %.200s", raw)
	}
	var list []json.RawMessage
	if json.Unmarshal(t.PreviousAttemptsRaw, &list) == nil {
		t.PreviousAttempts = list
	}
	var inputs []json.RawMessage
	if json.Unmarshal(t.InputsRaw, &inputs) == nil {
		t.Inputs = inputs
	}
	return &t, nil
}

// typeName is the task's type name ("" when the service sent no type).
func (t *claimedTask) typeName() string {
	if t.TaskType == nil {
		return ""
	}
	return t.TaskType.Name
}

// paramsJSON is the params, indented; {} when there are none.
func (t *claimedTask) paramsJSON() []byte {
	p := bytes.TrimSpace(t.Params)
	if len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return []byte("{}\n")
	}
	var out bytes.Buffer
	if json.Indent(&out, p, "", "  ") != nil {
		return append(bytes.Clone(p), '\n')
	}
	out.WriteByte('\n')
	return out.Bytes()
}

// checkpointJSON is the checkpoint the claim carried, indented, for
// $TASK_CHECKPOINT; empty when there is none.
func (t *claimedTask) checkpointJSON() []byte {
	if t.Checkpoint == nil {
		return nil
	}
	return indentJSON(t.Checkpoint.State)
}

// inputsJSON is the inputs, indented, for $TASK_INPUTS; [] when none.
func (t *claimedTask) inputsJSON() []byte {
	if len(t.Inputs) == 0 {
		return []byte("[]\n")
	}
	return indentJSON(t.InputsRaw)
}

func indentJSON(raw []byte) []byte {
	var out bytes.Buffer
	if json.Indent(&out, bytes.TrimSpace(raw), "", "  ") != nil {
		return append(bytes.Clone(raw), '\n')
	}
	out.WriteByte('\n')
	return out.Bytes()
}

// buildPrompt is the Markdown the command gets on stdin and in
// TASK_PROMPT_FILE: everything needed to do the task and how to report.
func buildPrompt(t *claimedTask) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Task: %s\n\n", t.Title)
	fmt.Fprintf(&b, "- Task ID: %s\n", t.ID)
	if tt := t.TaskType; tt != nil {
		label := tt.Name
		if tt.Label != "" && tt.Label != tt.Name {
			label += " (" + tt.Label + ")"
		}
		fmt.Fprintf(&b, "- Type: %s\n", label)
	}
	fmt.Fprintf(&b, "- Priority: %s\n", t.Priority)
	fmt.Fprintf(&b, "- Attempt: %d\n", t.RetryCount+1)
	if t.ParentTaskID != nil {
		fmt.Fprintf(&b, "- Retry of task: %s\n", *t.ParentTaskID)
	}
	if d := strings.TrimSpace(t.Description); d != "" {
		fmt.Fprintf(&b, "\n## Description\n\n%s\n", d)
	}
	if tt := t.TaskType; tt != nil {
		if d := strings.TrimSpace(tt.Description); d != "" {
			fmt.Fprintf(&b, "\n## About this type of task\n\n%s\n", d)
		}
		if sop := strings.TrimSpace(tt.SOP); sop != "" {
			fmt.Fprintf(&b, "\n## Standard operating procedure\n\n%s\n", sop)
		}
	}
	fmt.Fprintf(&b, "\n## Parameters\n\n```json\n%s```\n", t.paramsJSON())
	if len(t.PreviousAttempts) > 0 {
		b.WriteString("\n## Previous attempts\n\nThis task was tried before. Learn from what happened:\n\n")
		for i, a := range t.PreviousAttempts {
			if i > 0 {
				b.WriteByte('\n')
			}
			writeAttempt(&b, i+1, a)
		}
	}
	writeInputs(&b, t.Inputs)
	if t.Checkpoint != nil {
		fmt.Fprintf(&b, "\n## Checkpoint\n\nAn earlier attempt saved this checkpoint at %s (it is also in the file named in\n$TASK_CHECKPOINT). Resume from it rather than starting over:\n\n```json\n%s```\n",
			t.Checkpoint.CheckpointedAt.Format(time.RFC3339), capText(string(indentJSON(t.Checkpoint.State)), 8000))
	}
	b.WriteString(`
## How to report

- Print short progress notes on stdout, one per line; they are posted to the task as updates.
- When done, print the result as a single line of JSON (an object) as the last JSON line
  on stdout, or write it to the file named in $TASK_RESULT_FILE.
- To let a later attempt resume if this one is cut short, keep your state (a session id,
  a cursor) as JSON in the file named in $TASK_CHECKPOINT; it is saved as it changes.
- Exit with status 0 when the task is done. If it cannot be done, explain why on stderr
  and exit with a non-zero status: the end of stderr becomes the failure reason.
`)
	return b.String()
}

// writeInputs names the dependencies' results (in $TASK_INPUTS in full),
// whatever their shape, every value capped.
func writeInputs(b *strings.Builder, inputs []json.RawMessage) {
	if len(inputs) == 0 {
		return
	}
	b.WriteString("\n## Inputs\n\nThis task depends on the tasks below; their results and files are in the JSON file\nnamed in $TASK_INPUTS.\n")
	for i, raw := range inputs {
		var in struct {
			Ref             *string         `json:"ref"`
			DependsOn       string          `json:"depends_on"`
			TaskID          string          `json:"task_id"`
			Status          string          `json:"status"`
			Result          json.RawMessage `json:"result"`
			ResultTruncated bool            `json:"result_truncated"`
			Files           []inputFile     `json:"files"`
			Data            []inputFile     `json:"data"`
		}
		if json.Unmarshal(raw, &in) != nil {
			fmt.Fprintf(b, "\n### Input %d\n\n%s\n", i+1, capText(compactJSON(raw), 2000))
			continue
		}
		name := firstNonEmpty(deref(in.Ref), in.DependsOn, fmt.Sprintf("input %d", i+1))
		fmt.Fprintf(b, "\n### %s\n\n", name)
		if in.TaskID != "" {
			fmt.Fprintf(b, "- task_id: %s\n", in.TaskID)
		}
		if in.Status != "" {
			fmt.Fprintf(b, "- status: %s\n", in.Status)
		}
		if c := compactJSON(in.Result); len(in.Result) > 0 && c != "null" {
			cut := ""
			if in.ResultTruncated {
				cut = " (cut; the service sent its beginning)"
			}
			fmt.Fprintf(b, "- result%s: %s\n", cut, capText(c, 2000))
		}
		for _, f := range append(in.Files, in.Data...) {
			fmt.Fprintf(b, "- file: %s/%s (%s, data id %s)\n", f.DataType, f.Filename, events.HumanBytes(f.Size), f.ID)
		}
	}
}

// inputFile is a file of a dependency, as previous attempts list theirs.
type inputFile struct {
	ID       string `json:"id"`
	DataType string `json:"data_type"`
	Filename string `json:"filename"`
	Size     int64  `json:"size_bytes"`
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// attemptKeys are shown first, in this order, when an attempt has them
// (store.Attempt's fields, plus names older or newer servers may use).
var attemptKeys = []string{"task_id", "id", "title", "status", "worker", "worker_id", "started_at", "completed_at",
	"duration_seconds", "failure_kind", "kind", "failure_reason", "reason", "hint_for_next_attempt", "result",
	"result_truncated", "last_updates", "updates_total", "failure_evidence"}

// writeAttempt renders one previous attempt whatever its shape: known
// keys first, the rest as compact JSON, every value capped.
func writeAttempt(b *strings.Builder, n int, raw json.RawMessage) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			s = compactJSON(raw)
		}
		fmt.Fprintf(b, "### Attempt %d\n\n%s\n", n, capText(s, 2000))
		return
	}
	var num int
	if json.Unmarshal(obj["attempt"], &num) == nil && num > 0 {
		n = num
	}
	fmt.Fprintf(b, "### Attempt %d\n\n", n)
	seen := map[string]bool{"attempt": true}
	for _, k := range attemptKeys {
		if v, ok := obj[k]; ok {
			writeField(b, k, v)
			seen[k] = true
		}
	}
	rest := make([]string, 0, len(obj))
	for k := range obj {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		writeField(b, k, obj[k])
	}
}

func writeField(b *strings.Builder, k string, v json.RawMessage) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		if strings.TrimSpace(s) == "" {
			return
		}
		if strings.Contains(s, "\n") {
			fmt.Fprintf(b, "- %s:\n\n  ```\n  %s\n  ```\n", k, strings.ReplaceAll(capText(s, 4000), "\n", "\n  "))
			return
		}
		fmt.Fprintf(b, "- %s: %s\n", k, capText(s, 2000))
		return
	}
	var worker struct{ ID, Name string }
	if k == "worker" && json.Unmarshal(v, &worker) == nil && (worker.Name != "" || worker.ID != "") {
		fmt.Fprintf(b, "- worker: %s\n", strings.TrimSpace(worker.Name+" "+worker.ID))
		return
	}
	var updates []struct {
		At      string `json:"at"`
		Author  string `json:"author"`
		Message string `json:"message"`
	}
	if k == "last_updates" && json.Unmarshal(v, &updates) == nil {
		if len(updates) == 0 {
			return
		}
		b.WriteString("- last updates:\n")
		for _, u := range updates {
			msg := strings.ReplaceAll(capText(u.Message, 1000), "\n", "\n    ")
			fmt.Fprintf(b, "  - %s %s: %s\n", u.At, u.Author, msg)
		}
		return
	}
	if c := compactJSON(v); c != "null" && c != "false" && c != "[]" && c != "{}" {
		fmt.Fprintf(b, "- %s: %s\n", k, capText(c, 2000))
	}
}

func compactJSON(raw json.RawMessage) string {
	var out bytes.Buffer
	if json.Compact(&out, raw) != nil {
		return string(raw)
	}
	return out.String()
}

// capText keeps the first n bytes (at a rune boundary) and says how much
// was cut.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := splitMax(s, n)[0]
	return fmt.Sprintf("%s … (%d more bytes)", cut, len(s)-len(cut))
}
