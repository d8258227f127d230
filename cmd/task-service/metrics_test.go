package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/store/storetest"
)

// sample is one series of a scrape.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrape reads /metrics of base: the raw text and its samples.
func scrape(t *testing.T, base string) (string, []sample) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out []sample
	for _, line := range strings.Split(string(raw), "\n") {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		require.NoError(t, err, line)
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[p[1]] = p[2]
		}
		out = append(out, s)
	}
	return string(raw), out
}

// sum adds the samples of name whose labels include match.
func sum(samples []sample, name string, match map[string]string) float64 {
	total := 0.0
next:
	for _, s := range samples {
		if s.name != name {
			continue
		}
		for k, v := range match {
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
	}
	return total
}

// promtool is the promtool binary: $PROMTOOL, else on PATH. Without it the
// checks that need it fail when REQUIRE_PROMTOOL=1 (make test sets it after
// scripts/promtool.sh installed it) and are skipped otherwise.
func promtool(t *testing.T) string {
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if os.Getenv("REQUIRE_PROMTOOL") == "1" {
		t.Fatal("promtool is missing: run scripts/promtool.sh (it installs Debian's prometheus package)")
	}
	t.Log("promtool not found: skipping `promtool check metrics` (scripts/promtool.sh installs it)")
	return ""
}

// Every event the instance appends is counted, whoever caused it: the API,
// the bootstrap admin, the retry reactor and the stuck detector. The
// counters equal the rows of task_events by type; outcomes and retries
// equal theirs. The scrape passes `promtool check metrics`, and every
// taskservice_ series in it is documented in docs/ops/metrics.md.
func TestMetricsMatchTheLog(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1, "STUCK_TICK=200ms", "WORKER_OFFLINE_AFTER=2s", "TASK_STUCK_AFTER=3s",
		"METRICS_SAMPLE_INTERVAL=200ms")
	ctx := c.ctx
	retries := 1
	tt, err := c.admin.CreateTaskType(ctx, client.NewTaskType{Name: "metered", MaxRetries: &retries})
	require.NoError(t, err)
	w := c.worker("metered-worker", 5)
	silent := c.worker("silent-worker", 1)
	cl, quiet := w.clients[0], silent.clients[0]

	newTask := func(title, assignee string) string {
		task, err := c.admin.CreateTask(ctx, client.NewTask{Title: title, TaskTypeID: tt.ID, AssignedTo: assignee})
		require.NoError(t, err)
		return task.ID
	}
	done := newTask("completed", w.id)
	got, err := cl.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, done, got.ID)
	_, err = cl.Complete(ctx, done)
	require.NoError(t, err)

	failed := newTask("failed", w.id)
	got, err = cl.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, failed, got.ID)
	_, err = cl.Fail(ctx, failed, "HTTP 500 from the API")
	require.NoError(t, err)

	require.NoError(t, quiet.Heartbeat(ctx, client.Heartbeat{Status: "working"}))
	stuck := newTask("stuck", silent.id)
	got, err = quiet.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, stuck, got.ID)

	cancelled := newTask("cancelled", "")
	_, err = c.admin.CancelTask(ctx, cancelled, "not needed")
	require.NoError(t, err)

	c.eventually("the failure and the stuck task to be retried", func() bool {
		return c.count(`SELECT count(*) FROM worker_tasks WHERE id = ANY($1) AND retry_outcome = 'retried'`,
			[]string{failed, stuck}) == 2
	})

	var samples []sample
	var raw, diff string
	countersMatch := func() bool {
		raw, samples = scrape(t, c.ins[0].base)
		rows, err := c.pool.Query(ctx, `SELECT type, count(*) FROM task_events GROUP BY type ORDER BY type`)
		require.NoError(t, err)
		byType, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			Type string
			N    int
		}])
		require.NoError(t, err)
		diff = ""
		total := 0
		for _, r := range byType {
			total += r.N
			if got := sum(samples, "taskservice_events_appended_total", map[string]string{"type": r.Type}); int(got) != r.N {
				diff += fmt.Sprintf("%s: %v counted, %d rows; ", r.Type, got, r.N)
			}
		}
		if got := sum(samples, "taskservice_events_appended_total", nil); int(got) != total {
			diff += fmt.Sprintf("all: %v counted, %d rows", got, total)
		}
		return diff == ""
	}
	for deadline := time.Now().Add(30 * time.Second); !countersMatch(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the counters do not equal the rows of task_events: %s", diff)
		}
	}
	for _, tc := range []struct {
		match map[string]string
		sql   string
	}{
		{map[string]string{"outcome": "completed"}, `SELECT count(*) FROM task_events WHERE type = 'task.completed'`},
		{map[string]string{"outcome": "cancelled"}, `SELECT count(*) FROM task_events WHERE type = 'task.cancelled'`},
		{map[string]string{"outcome": "failed", "failure_kind": "error"}, `SELECT count(*) FROM task_events WHERE type = 'task.failed' AND data->>'kind' = 'error'`},
		{map[string]string{"outcome": "failed", "failure_kind": "worker_offline"}, `SELECT count(*) FROM task_events WHERE type = 'task.failed' AND data->>'kind' = 'worker_offline'`},
	} {
		want := c.count(tc.sql)
		require.Positive(t, want, tc.sql)
		tc.match["task_type"] = "metered"
		require.EqualValues(t, want, sum(samples, "taskservice_task_outcomes_total", tc.match), "%v", tc.match)
	}
	require.EqualValues(t, c.count(`SELECT count(*) FROM task_events WHERE type = 'task.retried'`),
		sum(samples, "taskservice_retries_total", map[string]string{"outcome": "created"}))
	require.EqualValues(t, 3, sum(samples, "taskservice_task_queue_wait_seconds_count", nil), "three claims")
	require.EqualValues(t, 3, sum(samples, "taskservice_task_run_seconds_count", map[string]string{"task_type": "metered"}),
		"completed, failed and stuck each ended a run")
	require.EqualValues(t, 1, sum(samples, "taskservice_listener_connected", nil))
	require.Positive(t, sum(samples, "taskservice_db_pool_connections", map[string]string{"state": "max"}))
	// The two retries wait in the queue; the silent worker is offline, the
	// other one keeps beating (WORKER_OFFLINE_AFTER is 2 s here).
	var gauges []float64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		require.NoError(t, cl.Heartbeat(ctx, client.Heartbeat{Status: "idle"}))
		time.Sleep(300 * time.Millisecond) // a sample after the beat
		_, samples = scrape(t, c.ins[0].base)
		gauges = []float64{sum(samples, "taskservice_queue_depth", map[string]string{"task_type": "metered"}),
			sum(samples, "taskservice_tasks", map[string]string{"status": "pending"}),
			sum(samples, "taskservice_workers_online", nil),
			sum(samples, "taskservice_worker_slots", map[string]string{"state": "free"})}
		if slices.Equal(gauges, []float64{2, 2, 1, 5}) {
			break
		}
		require.False(t, time.Now().After(deadline), "queue depth, pending, workers online, free slots: %v", gauges)
	}
	// The backlog by state comes from pending_counts (ADR 031): each cell
	// equals a count of the tasks' rows, and the cells add up to the backlog.
	rows, err := c.pool.Query(ctx, `SELECT w.priority, tt.name,
	       CASE WHEN w.status = 'blocked' THEN 'blocked' WHEN w.scheduled THEN 'scheduled'
	            WHEN tt.paused THEN 'paused' ELSE 'claimable' END, count(*)
	  FROM worker_tasks w JOIN task_types tt ON tt.id = w.task_type_id
	 WHERE w.status IN ('pending', 'blocked') GROUP BY 1, 2, 3`)
	require.NoError(t, err)
	cells, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Priority, Type, State string
		N                     int
	}])
	require.NoError(t, err)
	require.NotEmpty(t, cells)
	backlog := 0
	for _, cell := range cells {
		backlog += cell.N
		require.EqualValues(t, cell.N, sum(samples, "taskservice_backlog_tasks",
			map[string]string{"priority": cell.Priority, "task_type": cell.Type, "state": cell.State}), "%+v", cell)
	}
	require.EqualValues(t, backlog, sum(samples, "taskservice_backlog_tasks", nil))

	documented := documentedMetrics(t)
	for _, s := range samples {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(s.name, "_bucket"), "_count"), "_sum")
		if strings.HasPrefix(s.name, "taskservice_") {
			require.True(t, documented[s.name] || documented[base], "%s is exported but not in docs/ops/metrics.md", s.name)
		}
	}

	if bin := promtool(t); bin != "" {
		cmd := exec.Command(bin, "check", "metrics")
		cmd.Stdin = strings.NewReader(raw)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool check metrics:\n%s", out)
		require.Empty(t, strings.TrimSpace(string(out)), "promtool check metrics is clean")
	}
}

// documentedMetrics are the metric names in docs/ops/metrics.md's tables.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "ops", "metrics.md"))
	require.NoError(t, err)
	names := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_:]+)`").FindAllStringSubmatch(string(doc), -1) {
		names[m[1]] = true
	}
	require.NotEmpty(t, names)
	return names
}

// stallAlerts counts the stall alerts about one pid (other test packages
// running at the same time may hold the horizon back briefly too).
const stallAlerts = `SELECT count(*) FROM telegram_outbox WHERE kind = 'horizon.stall' AND text LIKE $1`

// A transaction left open in another database of the cluster holds back
// every consumer. While it lasts the horizon age and the reactor lag grow,
// a warning names the blocker, and past the threshold the stall is recorded
// for Telegram once; when it ends, the retry it held back is made and the
// age falls to 0. Not parallel: the stall holds back every consumer of the
// cluster, the other tests' included, so it runs before them, alone.
func TestHorizonStallIsVisible(t *testing.T) {
	bot := newBotFake(t, func(int) (int, string) { return 0, "" })
	c := newCluster(t, 1, "METRICS_SAMPLE_INTERVAL=100ms", "STALL_WARN_AFTER=500ms", "STALL_ALERT_AFTER=1s",
		"REACTOR_CATCH_UP=200ms", "LOG_LEVEL=warn",
		"TELEGRAM_ENABLED=true", "TELEGRAM_BOT_TOKEN="+tgToken, "TELEGRAM_CHAT_ID=-100777", "TELEGRAM_API_BASE="+bot.srv.URL)
	ctx := c.ctx
	retries := 1
	tt, err := c.admin.CreateTaskType(ctx, client.NewTaskType{Name: "held", MaxRetries: &retries})
	require.NoError(t, err)
	w := c.worker("held-worker", 1)
	task, err := c.admin.CreateTask(ctx, client.NewTask{Title: "held back", TaskTypeID: tt.ID, AssignedTo: w.id})
	require.NoError(t, err)
	_, err = w.clients[0].Claim(ctx)
	require.NoError(t, err)

	// Another database of the same cluster: a transaction that holds an xid.
	other, err := pgx.Connect(ctx, storetest.NewDB(t)+"&application_name=nightly-report")
	require.NoError(t, err)
	defer other.Close(context.Background())
	blocker, err := other.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback(context.Background()) }()
	var pid int
	_, err = blocker.Exec(ctx, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)
	require.NoError(t, blocker.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))

	_, err = w.clients[0].Fail(ctx, task.ID, "HTTP 500")
	require.NoError(t, err)

	metric := func(name string, match map[string]string) float64 {
		_, s := scrape(t, c.ins[0].base)
		return sum(s, name, match)
	}
	var age1, lag1 float64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		age1 = metric("taskservice_xid_horizon_age_seconds", nil)
		lag1 = metric("taskservice_reactor_lag_seconds", map[string]string{"reactor": "retry_advice"})
		if age1 > 0.5 && lag1 > 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "the stall does not show: horizon age %v, retry_advice lag %v", age1, lag1)
	}
	c.eventually("the stall to be logged and recorded for Telegram", func() bool {
		c.ins[0].mu.Lock()
		logs := c.ins[0].logs.String()
		c.ins[0].mu.Unlock()
		return strings.Contains(logs, "holds back the xid horizon") && strings.Contains(logs, fmt.Sprintf(`"pid":%d`, pid)) &&
			strings.Contains(logs, `"application":"nightly-report"`) && strings.Contains(logs, `"query_start"`) &&
			c.count(stallAlerts, fmt.Sprintf("%%(pid %d,%%", pid)) == 1
	})
	c.eventually("the age and the lag to grow while it lasts", func() bool {
		return metric("taskservice_xid_horizon_age_seconds", nil) > age1+0.3 &&
			metric("taskservice_reactor_lag_seconds", map[string]string{"reactor": "retry_advice"}) > lag1+0.3
	})
	require.Nil(t, func() *string {
		var outcome *string
		require.NoError(t, c.pool.QueryRow(ctx, `SELECT retry_outcome FROM worker_tasks WHERE id = $1`, task.ID).Scan(&outcome))
		return outcome
	}(), "no retry while the horizon is held back")
	var text string
	require.NoError(t, c.pool.QueryRow(ctx, `SELECT text FROM telegram_outbox WHERE kind = 'horizon.stall' AND text LIKE $1`,
		fmt.Sprintf("%%(pid %d,%%", pid)).Scan(&text))
	require.Contains(t, text, "nightly-report")

	require.NoError(t, blocker.Rollback(ctx))
	c.eventually("the held-back retry once the transaction ended", func() bool {
		return c.count(`SELECT count(*) FROM worker_tasks WHERE id = $1 AND retry_outcome = 'retried'`, task.ID) == 1
	})
	c.eventually("the horizon age to fall back to 0", func() bool {
		return metric("taskservice_xid_horizon_age_seconds", nil) == 0
	})
	require.Equal(t, 1, c.count(stallAlerts, fmt.Sprintf("%%(pid %d,%%", pid)), "one alert per stall")
}

// metricName finds metric names in PromQL and Go source.
var (
	promqlMetric   = regexp.MustCompile(`\btaskservice_[a-z_]+`)
	registeredName = regexp.MustCompile(`(?:Name:\s*|NewDesc\()"(taskservice_[a-z_]+)"`)
)

// seriesBase is a histogram series' metric name.
func seriesBase(name string) string {
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		name = strings.TrimSuffix(name, suffix)
	}
	return name
}

// The shipped dashboard and alerting rules only use series the service
// registers, and docs/ops/metrics.md lists exactly the series the code
// registers (those no test workload scrapes included). With promtool, every
// dashboard expression parses as PromQL.
func TestDashboardAndAlertsNameExportedMetrics(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	registered := map[string]bool{}
	require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range registeredName.FindAllStringSubmatch(string(src), -1) {
			registered[m[1]] = true
		}
		return nil
	}))
	documented := documentedMetrics(t)
	for name := range registered {
		require.True(t, documented[name], "%s is registered in the code but not in docs/ops/metrics.md", name)
	}
	for name := range documented {
		require.True(t, registered[name], "docs/ops/metrics.md lists %s, which no code registers", name)
	}

	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	raw, err := os.ReadFile(filepath.Join(root, "docs", "ops", "grafana.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Panels)
	var exprs []string
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, target := range p.Targets {
			exprs = append(exprs, target.Expr)
		}
	}
	alerts, err := os.ReadFile(filepath.Join(root, "docs", "ops", "alerts.yml"))
	require.NoError(t, err)
	for _, src := range append(exprs, string(alerts)) {
		names := promqlMetric.FindAllString(src, -1)
		require.NotEmpty(t, names, "%q names no task-service metric", src)
		for _, name := range names {
			require.True(t, registered[seriesBase(name)], "%q uses %s, which task-service does not export", src, name)
		}
	}

	if bin := promtool(t); bin != "" {
		// Recording rules are the one place promtool checks a bare expression.
		var rules strings.Builder
		rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
		for i, e := range exprs {
			quoted, _ := json.Marshal(e)
			fmt.Fprintf(&rules, "      - record: dashboard_expr_%d\n        expr: %s\n", i, quoted)
		}
		file := filepath.Join(t.TempDir(), "dashboard_rules.yml")
		require.NoError(t, os.WriteFile(file, []byte(rules.String()), 0o600))
		out, err := exec.Command(bin, "check", "rules", file).CombinedOutput()
		require.NoError(t, err, "dashboard expressions:\n%s", out)
	}
}
