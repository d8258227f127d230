package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

// Day is the team's day that usage totals and budgets count in.
func (db *DB) Day() events.TeamDay { return db.day }

// Prices is the price table that prices usage reported without a cost.
func (db *DB) Prices() events.Prices { return db.prices }

// rootOf is the first task of t's retry chain. The walk follows parents
// by primary key, as many steps as the chain has retries.
func rootOf(ctx context.Context, q Querier, t *events.Task) (string, error) {
	if t.ParentTaskID == nil {
		return t.ID, nil
	}
	var root string
	err := q.QueryRow(ctx, `WITH RECURSIVE up(id, parent) AS (
    SELECT id, parent_task_id FROM worker_tasks WHERE id = $1
    UNION ALL
    SELECT w.id, w.parent_task_id FROM worker_tasks w JOIN up ON w.id = up.parent
)
SELECT id::text FROM up WHERE parent IS NULL LIMIT 1`, *t.ParentTaskID).Scan(&root)
	if errors.Is(err, pgx.ErrNoRows) {
		return *t.ParentTaskID, nil // a parent outside the table: it heads the chain
	}
	if err != nil {
		return "", mapErr(fmt.Errorf("retry chain of %s: %w", t.ID, err))
	}
	return root, nil
}

// attribution is where usage on t counts now.
func (db *DB) attribution(ctx context.Context, q Querier, t *events.Task) (events.UsageAttribution, error) {
	root, err := rootOf(ctx, q, t)
	if err != nil {
		return events.UsageAttribution{}, err
	}
	return events.UsageAttribution{RootTaskID: root, Day: db.day.Of(db.Now()), Prices: db.prices}, nil
}

// ReportUsage records a worker's LLM usage on the task it holds in
// progress: one task.usage_reported event, whose batch adds it to the
// totals of the task, its retry chain, its type's day and the worker's
// day. u must be validated (events.UsageReport.Validate).
func (db *DB) ReportUsage(ctx context.Context, taskID, workerID string, u events.UsageReport, meta events.Meta) (*events.Task, []events.Envelope, error) {
	return db.UpdateTask(ctx, db.pool, taskID, meta, func(t *events.Task) ([]events.Payload, error) {
		a, err := db.attribution(ctx, db.ambient(ctx, db.pool), t)
		if err != nil {
			return nil, err
		}
		ps, err := t.ReportUsage(workerID, u, a)
		if err == nil {
			err = t.Room("body")
		}
		return ps, err
	})
}

// RecordAdvisorUsage records the usage of the retry advisor's model call
// about task taskID, in q (the retry reactor's transaction).
func (db *DB) RecordAdvisorUsage(ctx context.Context, q Querier, taskID string, u events.UsageReport) error {
	meta := events.Meta{Actor: events.System(events.RetryAdvisorName)}
	_, _, err := db.UpdateTask(ctx, q, taskID, meta, func(t *events.Task) ([]events.Payload, error) {
		a, err := db.attribution(ctx, q, t)
		if err != nil {
			return nil, err
		}
		return t.RecordAdvisorUsage(u, a)
	})
	return err
}

// UsageTotals are LLM usage counters.
type UsageTotals struct {
	// Reports counts usage reports; UnpricedReports those whose model the
	// price table did not know and that gave no cost (counted at cost 0).
	Reports          int64   `json:"reports"`
	UnpricedReports  int64   `json:"unpriced_reports"`
	InputTokens      int64   `json:"input_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	CacheReadTokens  int64   `json:"cache_read_tokens"`
	CacheWriteTokens int64   `json:"cache_write_tokens"`
	Tokens           int64   `json:"tokens" doc:"the four kinds together: what token budgets count"`
	CostUSD          float64 `json:"cost_usd"`
}

// usageTotalColumns are the counters of the llm_usage_* row aliased a, 0
// when there is none (nothing reported yet).
func usageTotalColumns(a string) string {
	counters := []string{"reports", "unpriced_reports", "input_tokens", "output_tokens",
		"cache_read_tokens", "cache_write_tokens", "cost_micro_usd"} // projections.UsageColumns
	cols := make([]string, len(counters))
	for i, c := range counters {
		cols[i] = "coalesce(" + a + "." + c + ", 0)"
	}
	return strings.Join(cols, ", ")
}

// usageDest scans usageTotalColumns; call finish after.
type usageDest struct {
	t     *UsageTotals
	micro int64
}

func (d *usageDest) dest() []any {
	return []any{&d.t.Reports, &d.t.UnpricedReports, &d.t.InputTokens, &d.t.OutputTokens,
		&d.t.CacheReadTokens, &d.t.CacheWriteTokens, &d.micro}
}

func (d *usageDest) finish() {
	d.t.Tokens = d.t.InputTokens + d.t.OutputTokens + d.t.CacheReadTokens + d.t.CacheWriteTokens
	d.t.CostUSD = float64(d.micro) / events.UsageCostDecimal
}

// TaskUsage is a task's LLM usage and its retry chain's.
type TaskUsage struct {
	TaskID     string      `json:"task_id"`
	RootTaskID string      `json:"root_task_id"`
	Task       UsageTotals `json:"task"`
	Chain      UsageTotals `json:"chain" doc:"every attempt of the retry chain the task belongs to, and the retry advisor's calls about them"`
}

// TaskUsage reads a task's usage totals and its chain's by primary key.
func (db *DB) TaskUsage(ctx context.Context, id string) (*TaskUsage, error) {
	t, err := db.GetTask(ctx, db.pool, id)
	if err != nil {
		return nil, err
	}
	root, err := rootOf(ctx, db.pool, t)
	if err != nil {
		return nil, err
	}
	out := &TaskUsage{TaskID: t.ID, RootTaskID: root}
	task, chain := usageDest{t: &out.Task}, usageDest{t: &out.Chain}
	err = db.pool.QueryRow(ctx, `SELECT `+usageTotalColumns("t")+`, `+usageTotalColumns("c")+` FROM (SELECT 1) one
  LEFT JOIN llm_usage_tasks t ON t.task_id = $1
  LEFT JOIN llm_usage_chains c ON c.root_task_id = $2`,
		t.ID, root).Scan(append(task.dest(), chain.dest()...)...)
	if err != nil {
		return nil, mapErr(fmt.Errorf("task usage: %w", err))
	}
	task.finish()
	chain.finish()
	return out, nil
}

// TypeDayUsage is a task type's LLM usage in one team day, against its
// daily budgets.
type TypeDayUsage struct {
	TaskTypeID string      `json:"task_type_id"`
	Name       string      `json:"name"`
	Label      string      `json:"label"`
	Day        string      `json:"day" doc:"the team's day (YYYY-MM-DD in DIGEST_TZ)"`
	Usage      UsageTotals `json:"usage"`
	// Budgets: nil when the type has none.
	DailyTokenBudget   *int64   `json:"daily_token_budget"`
	DailyCostBudgetUSD *float64 `json:"daily_cost_budget_usd"`
	// Paused, PausedBy and PauseReason: the type's pause now (PausedBy is
	// "budget" for a budget's pause).
	Paused      bool   `json:"paused"`
	PausedBy    string `json:"paused_by,omitempty"`
	PauseReason string `json:"pause_reason,omitempty"`
}

// CostBudget is the daily cost budget in USD, 0 when there is none.
func (u TypeDayUsage) CostBudget() float64 {
	if u.DailyCostBudgetUSD == nil {
		return 0
	}
	return *u.DailyCostBudgetUSD
}

// OverBudget names the first daily budget the day's usage reached, with
// its figures ("" when none): the pause reason a budget gives.
func (u TypeDayUsage) OverBudget() string {
	if b := u.DailyTokenBudget; b != nil && u.Usage.Tokens >= *b {
		return fmt.Sprintf("daily token budget spent, %d of %d tokens on %s", u.Usage.Tokens, *b, u.Day)
	}
	if b := u.DailyCostBudgetUSD; b != nil && u.Usage.CostUSD >= *b {
		return fmt.Sprintf("daily cost budget spent, %.2f of %.2f USD on %s", u.Usage.CostUSD, *b, u.Day)
	}
	return ""
}

var typeDayUsageQuery = `SELECT tt.id::text, tt.name, tt.label, ` + usageTotalColumns("u") + `,
       tt.daily_token_budget, tt.daily_cost_budget_micro_usd, tt.paused, tt.paused_by, tt.pause_reason
  FROM task_types tt
  LEFT JOIN llm_usage_type_days u ON u.task_type_id = tt.id AND u.day = $1::date`

func scanTypeDayUsage(row pgx.Row, day string) (TypeDayUsage, error) {
	out := TypeDayUsage{Day: day}
	d := usageDest{t: &out.Usage}
	var costBudget *int64
	err := row.Scan(append(append([]any{&out.TaskTypeID, &out.Name, &out.Label}, d.dest()...),
		&out.DailyTokenBudget, &costBudget, &out.Paused, &out.PausedBy, &out.PauseReason)...)
	if err != nil {
		return out, err
	}
	d.finish()
	if costBudget != nil {
		usd := float64(*costBudget) / events.UsageCostDecimal
		out.DailyCostBudgetUSD = &usd
	}
	return out, nil
}

// TypesUsageToday is today's LLM usage (the team's day, DIGEST_TZ) of every
// task type that is not archived, by name, with its daily budgets: what a
// budget command or the daily digest reports. Each type's totals are read
// by primary key: the cost does not grow with tasks or history.
func (db *DB) TypesUsageToday(ctx context.Context) ([]TypeDayUsage, error) {
	return db.TypesUsageOn(ctx, db.day.Of(db.Now()))
}

// TypesUsageOn is TypesUsageToday for another team day (YYYY-MM-DD), such
// as yesterday for a digest.
func (db *DB) TypesUsageOn(ctx context.Context, day string) ([]TypeDayUsage, error) {
	if _, err := time.Parse(time.DateOnly, day); err != nil {
		return nil, events.Invalid("day", "must be a date like 2026-11-26")
	}
	rows, err := db.pool.Query(ctx, typeDayUsageQuery+` WHERE NOT tt.archived ORDER BY tt.name`, day)
	if err != nil {
		return nil, mapErr(fmt.Errorf("types usage: %w", err))
	}
	defer rows.Close()
	out := []TypeDayUsage{}
	for rows.Next() {
		u, err := scanTypeDayUsage(rows, day)
		if err != nil {
			return nil, mapErr(fmt.Errorf("types usage: %w", err))
		}
		out = append(out, u)
	}
	return out, mapErr(rows.Err())
}

// TypeUsageToday is one type's LLM usage today against its budgets.
func (db *DB) TypeUsageToday(ctx context.Context, q Querier, id string) (*TypeDayUsage, error) {
	day := db.day.Of(db.Now())
	u, err := scanTypeDayUsage(q.QueryRow(ctx, typeDayUsageQuery+` WHERE tt.id = $2`, day, id), day)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, events.NotFound("task type", id)
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("type usage: %w", err))
	}
	return &u, nil
}

// WorkerDayUsage is a worker's LLM usage in one team day.
type WorkerDayUsage struct {
	WorkerID string      `json:"worker_id"`
	Day      string      `json:"day"`
	Usage    UsageTotals `json:"usage"`
}

// WorkerUsageToday reads a worker's usage today by primary key.
func (db *DB) WorkerUsageToday(ctx context.Context, workerID string) (*WorkerDayUsage, error) {
	out := &WorkerDayUsage{WorkerID: workerID, Day: db.day.Of(db.Now())}
	d := usageDest{t: &out.Usage}
	err := db.pool.QueryRow(ctx, `SELECT `+usageTotalColumns("u")+` FROM (SELECT 1) one
  LEFT JOIN llm_usage_worker_days u ON u.worker_id = $1 AND u.day = $2::date`, workerID, out.Day).Scan(d.dest()...)
	if err != nil {
		return nil, mapErr(fmt.Errorf("worker usage: %w", err))
	}
	d.finish()
	return out, nil
}

// UpdateTaskTypeIn is UpdateTaskType in q (a reactor's transaction): a
// lost race is returned (ErrConflict) and aborts q, for the caller to retry.
func (db *DB) UpdateTaskTypeIn(ctx context.Context, q Querier, id string, meta events.Meta, decide func(*events.TaskType) ([]events.Payload, error)) (*events.TaskType, error) {
	tt, err := db.GetTaskType(ctx, q, id)
	if err != nil {
		return nil, err
	}
	ps, err := decide(tt)
	if err != nil {
		return nil, err
	}
	after, _, err := appendStream(ctx, db, q, events.StreamTaskType, id, tt, ps, meta, db.projector.TaskType, nil)
	return after, err
}

// BudgetPausedTypes lists the types a budget paused, with when: the few
// the day's turn may resume.
func (db *DB) BudgetPausedTypes(ctx context.Context) ([]events.TaskType, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+taskTypeColumns+` FROM task_types tt
		WHERE tt.paused AND tt.paused_by = $1 ORDER BY tt.name`, events.BudgetPauser)
	if err != nil {
		return nil, mapErr(fmt.Errorf("budget pauses: %w", err))
	}
	defer rows.Close()
	var out []events.TaskType
	for rows.Next() {
		var tt events.TaskType
		if err := rows.Scan(taskTypeDest(&tt)...); err != nil {
			return nil, mapErr(err)
		}
		normalizeTaskType(&tt)
		out = append(out, tt)
	}
	return out, mapErr(rows.Err())
}
