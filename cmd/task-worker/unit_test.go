package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// recorder collects posted updates.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) post(_ context.Context, msg string) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, msg)
	r.mu.Unlock()
	return nil
}

func (r *recorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.msgs {
		out = append(out, strings.Split(m, "\n")...)
	}
	return out
}

func TestUpdaterMergesAFloodAndKeepsEveryLine(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	lim := defaultUpdateLimits()
	lim.MinGap = 20 * time.Millisecond
	u := newUpdater(lim, zerolog.Nop(), rec.post)
	u.Start(context.Background())
	want := make([]string, 5000)
	for i := range want {
		want[i] = fmt.Sprintf("line %d", i)
		u.Add(want[i] + "\r") // CRLF endings lose the CR
	}
	u.Close()
	require.Equal(t, want, rec.lines())
	for _, m := range rec.msgs {
		require.LessOrEqual(t, len(m), lim.MaxMessage)
	}
	// 5000 short lines are ~44 KB: a handful of 8 KB updates, not 100 of 50 lines.
	require.Less(t, len(rec.msgs), 20, "updates: %d", len(rec.msgs))
}

func TestUpdaterOmitsTheMiddleOfAHugeBacklogAndSaysSo(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	lim := defaultUpdateLimits()
	lim.MaxBacklog = 4 << 10
	lim.TailLines = 3
	lim.MinGap = time.Millisecond
	block := make(chan struct{})
	first := true
	u := newUpdater(lim, zerolog.Nop(), func(ctx context.Context, msg string) error {
		if first {
			first = false
			<-block // the service is slow: the backlog fills up
		}
		return rec.post(ctx, msg)
	})
	u.Start(context.Background())
	for i := range 60 {
		u.Add(fmt.Sprintf("%03d %s", i, strings.Repeat("x", 96)))
	}
	u.Add("boom") // lets the first post go: it takes the first 60 lines
	close(block)
	for i := range 2000 {
		u.Add(fmt.Sprintf("flood %04d %s", i, strings.Repeat("y", 90)))
	}
	u.Close()
	got := rec.lines()
	joined := strings.Join(got, "\n")
	require.Contains(t, joined, "lines omitted")
	require.Equal(t, "flood 1999 "+strings.Repeat("y", 90), got[len(got)-1], "the tail is kept")
	_, _, omitted := u.stats()
	require.Positive(t, omitted)
	// Lines are never reordered.
	last := ""
	for _, l := range got {
		if strings.HasPrefix(l, "flood ") {
			require.Greater(t, l[:10], last)
			last = l[:10]
		}
	}
}

func TestSplitAndSanitize(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 10) // 2 bytes each
	parts := splitMax(long, 5)
	require.Equal(t, long, strings.Join(parts, ""))
	for _, p := range parts {
		require.LessOrEqual(t, len(p), 5)
		require.True(t, json.Valid([]byte(fmt.Sprintf("%q", p))))
	}
	require.Equal(t, "ab\uFFFDc", sanitizeLine("a\x00b\xffc\r"))
	require.Equal(t, "é", string(lastRunes([]byte("aé"), 2)))
	require.Equal(t, "", string(lastRunes([]byte("é"), 1)))
}

func TestReadStdoutFindsTheLastJSONObject(t *testing.T) {
	t.Parallel()
	var lines []string
	in := "hello\n{\"a\":1}\nnot {json}\n{\"b\": [1,2]}\n[1,2]\n{broken\ntrailing"
	last := readStdout(strings.NewReader(in), func(l string) { lines = append(lines, l) })
	require.JSONEq(t, `{"b":[1,2]}`, string(last))
	require.Equal(t, strings.Split(in, "\n"), lines)

	// A line longer than the result limit is posted in pieces and never taken as the result.
	huge := `{"x":"` + strings.Repeat("z", maxResultLine) + `"}`
	lines = nil
	last = readStdout(strings.NewReader(`{"small":1}`+"\n"+huge+"\n"), func(l string) { lines = append(lines, l) })
	require.JSONEq(t, `{"small":1}`, string(last))
	require.Equal(t, huge, strings.Join(lines[1:], ""))
}

func TestConfigPrecedenceFlagEnvFileDefault(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "w.json")
	require.NoError(t, os.WriteFile(file, []byte(`{
		"api": "http://file:1", "email": "file@x", "password": "pw-file", "slots": 3, "grace_seconds": 60,
		"command": "file-cmd", "timeout_seconds": 600, "env": {"A": "1", "B": "1"},
		"types": {"review": {"command": "review-cmd", "timeout_seconds": 100, "env": {"B": "2"}, "workdir": "/srv"}}
	}`), 0o600))
	env := map[string]string{"TASK_WORKER_CONFIG": file, "TASK_WORKER_EMAIL": "env@x", "TASK_WORKER_SLOTS": "4"}
	cfg, err := loadConfig([]string{"--slots", "5"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "http://file:1", cfg.API)     // file
	require.Equal(t, "env@x", cfg.Email)           // env beats file
	require.Equal(t, 5, cfg.Slots)                 // flag beats env
	require.Equal(t, time.Minute, cfg.Grace)       // file
	require.Equal(t, 5*time.Second, cfg.KillGrace) // default
	require.Equal(t, "file-cmd", cfg.Command)

	s := cfg.Resolve("review", 0)
	require.Equal(t, "review-cmd", s.Command)
	require.Equal(t, 100*time.Second, s.Timeout)
	require.Equal(t, map[string]string{"A": "1", "B": "2"}, s.Env)
	require.Equal(t, "/srv", s.Workdir)
	require.Equal(t, 50*time.Second, cfg.Resolve("review", 50).Timeout, "the shorter of server and file")
	require.Equal(t, 100*time.Second, cfg.Resolve("review", 500).Timeout)
	other := cfg.Resolve("other", 0)
	require.Equal(t, "file-cmd", other.Command)
	require.Equal(t, 600*time.Second, other.Timeout)
	require.Equal(t, maxTimeout, cfg.Resolve("other", 99999).Timeout, "capped at 2h")

	_, err = loadConfig(nil, func(string) string { return "" }, io.Discard)
	require.ErrorContains(t, err, "--api")
	require.NoError(t, os.WriteFile(file, []byte(`{"timeout_secs": 5}`), 0o600))
	_, err = loadConfig([]string{"--config", file}, func(string) string { return "" }, io.Discard)
	require.ErrorContains(t, err, "timeout_secs", "a misspelt key is an error")
}

func TestPromptCarriesEverythingAndLooseAttempts(t *testing.T) {
	t.Parallel()
	raw := `{"id":"0190aaaa-0000-7000-8000-000000000001","title":"Fix the build","description":"CI is red",
		"task_type_id":"x","params":{"repo":"a/b"},"priority":"high","status":"in_progress","retry_count":1,
		"parent_task_id":"0190aaaa-0000-7000-8000-000000000000",
		"task_type":{"id":"x","name":"fix","label":"Fix things","sop":"1. Look\n2. Fix","description":"","param_schema":null,"max_retries":2},
		"previous_attempts":[{"task_id":"0190aaaa-0000-7000-8000-000000000000","attempt":1,"status":"failed","failure_kind":"timeout",
		  "failure_reason":"took too long","worker":{"id":"w1","name":"Bot One"},
		  "last_updates":[{"at":"2026-01-01T00:00:00Z","author":"Bot One","message":"tried X"}],"new_field":{"x":1}}, "just a string"]}`
	task, err := decodeClaim(json.RawMessage(raw))
	require.NoError(t, err)
	p := buildPrompt(task)
	for _, want := range []string{"# Task: Fix the build", "0190aaaa-0000-7000-8000-000000000001", "fix (Fix things)",
		"CI is red", "1. Look\n2. Fix", `"repo": "a/b"`, "Attempt: 2", "failure_kind: timeout", "took too long",
		`new_field: {"x":1}`, "just a string", "TASK_RESULT_FILE", "### Attempt 1", "worker: Bot One w1", "Bot One: tried X"} {
		require.Contains(t, p, want)
	}
	none, err := decodeClaim(json.RawMessage("null"))
	require.NoError(t, err)
	require.Nil(t, none)
}

// The dependencies' inputs and the checkpoint reach the command in files
// and in the prompt, whatever shape the inputs take.
func TestPromptCarriesInputsAndTheCheckpoint(t *testing.T) {
	t.Parallel()
	raw := `{"id":"0190aaaa-0000-7000-8000-000000000002","title":"Write the report","task_type_id":"x","params":{},
		"priority":"medium","status":"in_progress","retry_count":0,
		"inputs":[{"ref":"reddit","task_id":"0190aaaa-0000-7000-8000-00000000000a","result":{"posts":847},
		   "data":[{"id":"d1","data_type":"posts","filename":"nvda.jsonl","size_bytes":2048}]},
		  {"ref":null,"depends_on":"0190aaaa-0000-7000-8000-00000000000b","status":"completed","result":"bullish"}],
		"checkpoint":{"task_id":"0190aaaa-0000-7000-8000-000000000002","state":{"session_id":"sess-9"},"size_bytes":24,
		  "worker_id":"w","checkpointed_at":"2026-11-26T10:00:00Z","saves":3,"version":5}}`
	task, err := decodeClaim(json.RawMessage(raw))
	require.NoError(t, err)
	p := buildPrompt(task)
	for _, want := range []string{"## Inputs", "### reddit", `- result: {"posts":847}`, "- file: posts/nvda.jsonl (2.0 kB, data id d1)",
		"### 0190aaaa-0000-7000-8000-00000000000b", "- status: completed", `- result: "bullish"`,
		"## Checkpoint", `"session_id": "sess-9"`, "$TASK_CHECKPOINT", "$TASK_INPUTS"} {
		require.Contains(t, p, want)
	}
	var inputs []map[string]any
	require.NoError(t, json.Unmarshal(task.inputsJSON(), &inputs))
	require.Len(t, inputs, 2)
	require.JSONEq(t, `{"session_id":"sess-9"}`, string(task.checkpointJSON()))

	bare, err := decodeClaim(json.RawMessage(`{"id":"0190aaaa-0000-7000-8000-000000000003","title":"t"}`))
	require.NoError(t, err)
	require.Equal(t, "[]\n", string(bare.inputsJSON()))
	require.Empty(t, bare.checkpointJSON())
	require.NotContains(t, buildPrompt(bare), "## Inputs")
	require.NotContains(t, buildPrompt(bare), "## Checkpoint")
}

func TestTheExampleConfigsLoad(t *testing.T) {
	t.Parallel()
	env := map[string]string{"TASK_WORKER_API": "http://127.0.0.1:8001", "TASK_WORKER_EMAIL": "bot@example.com",
		"TASK_WORKER_PASSWORD": "x"}
	for _, name := range []string{"claude-code.json", "shell.json"} {
		cfg, err := loadConfig([]string{"--config", "../../docs/examples/" + name}, func(k string) string { return env[k] }, io.Discard)
		require.NoError(t, err, name)
		require.NotEmpty(t, cfg.Command, name)
	}
	cfg, err := loadConfig([]string{"--config", "../../docs/examples/claude-code.json"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	review := cfg.Resolve("code_review", 0)
	require.Contains(t, review.Command, "--permission-mode plan")
	require.Equal(t, 20*time.Minute, review.Timeout)
	require.Equal(t, "/srv/workspace", review.Workdir)
	require.Equal(t, "-mod=mod", cfg.Resolve("fix_bug", 0).Env["GOFLAGS"])
}

func TestVersionFlag(t *testing.T) {
	var out strings.Builder
	_, err := loadConfig([]string{"--version"}, func(string) string { return "" }, &out)
	require.ErrorIs(t, err, flag.ErrHelp, "--version prints and exits 0, like --help")
	require.Regexp(t, `^task-worker version \S+\nrevision .+\nmodule github.com/clawdbot/task-service\n`, out.String())
}
