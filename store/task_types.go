package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
)

const taskTypeColumns = `tt.id, tt.name, tt.label, tt.description, tt.sop, tt.param_schema, tt.max_retries,
 tt.timeout_seconds, tt.retry_backoff_seconds, tt.archived, tt.created_at, tt.updated_at, tt.version,
 tt.paused, tt.pause_reason, tt.paused_by, tt.paused_at, tt.max_in_progress,
 CASE WHEN tt.rate_limit_count IS NOT NULL THEN jsonb_build_object('count', tt.rate_limit_count, 'seconds', tt.rate_limit_seconds) END,
 tt.concurrency_key, tt.max_in_progress_per_key, coalesce(tt.alias, ''), tt.params_template,
 tt.daily_token_budget, tt.daily_cost_budget_micro_usd`

// taskTypeDest scans taskTypeColumns; call normalizeTaskType after.
func taskTypeDest(tt *events.TaskType) []any {
	return []any{&tt.ID, &tt.Name, &tt.Label, &tt.Description, &tt.SOP, &tt.ParamSchema, &tt.MaxRetries,
		&tt.TimeoutSeconds, &tt.RetryBackoffSeconds, &tt.Archived, &tt.CreatedAt, &tt.UpdatedAt, &tt.Version,
		&tt.Paused, &tt.PauseReason, &tt.PausedBy, &tt.PausedAt, &tt.MaxInProgress,
		rateLimitDest{&tt.RateLimit}, &tt.ConcurrencyKey, &tt.MaxInProgressPerKey, &tt.Alias, textJSONDest{&tt.ParamsTemplate},
		&tt.DailyTokenBudget, microUSDDest{&tt.DailyCostBudgetUSD}}
}

// microUSDDest scans a nullable bigint of millionths of a dollar into USD.
type microUSDDest struct{ usd **float64 }

func (d microUSDDest) Scan(src any) error {
	*d.usd = nil
	switch v := src.(type) {
	case nil:
		return nil
	case int64:
		usd := float64(v) / events.UsageCostDecimal
		*d.usd = &usd
		return nil
	}
	return fmt.Errorf("cost budget: unexpected %T", src)
}

// normalizeTaskType makes timestamps UTC so a read row equals the fold.
func normalizeTaskType(tt *events.TaskType) {
	tt.CreatedAt, tt.UpdatedAt = tt.CreatedAt.UTC(), tt.UpdatedAt.UTC()
	if tt.PausedAt != nil {
		at := tt.PausedAt.UTC()
		tt.PausedAt = &at
	}
}

// textJSONDest scans a text column holding JSON as written (nil for NULL).
type textJSONDest struct{ j *json.RawMessage }

func (d textJSONDest) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*d.j = nil
	case string:
		*d.j = json.RawMessage(v)
	case []byte:
		*d.j = append(json.RawMessage(nil), v...)
	default:
		return fmt.Errorf("text json: unexpected %T", src)
	}
	return nil
}

// rateLimitDest scans the rate limit's columns, as one jsonb object, back
// into the spec's form.
type rateLimitDest struct{ r **events.RateLimit }

func (d rateLimitDest) Scan(src any) error {
	*d.r = nil
	if src == nil {
		return nil
	}
	var raw []byte
	switch v := src.(type) {
	case []byte:
		raw = v
	case string:
		raw = []byte(v)
	default:
		return fmt.Errorf("rate limit: unexpected %T", src)
	}
	var c struct{ Count, Seconds int }
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("rate limit: %w", err)
	}
	*d.r = &events.RateLimit{Count: c.Count, Per: events.FormatWindow(time.Duration(c.Seconds) * time.Second)}
	return nil
}

// GetTaskType reads one task type.
func (db *DB) GetTaskType(ctx context.Context, q Querier, id string) (*events.TaskType, error) {
	var tt events.TaskType
	err := q.QueryRow(ctx, `SELECT `+taskTypeColumns+` FROM task_types tt WHERE tt.id = $1`, id).Scan(taskTypeDest(&tt)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, events.NotFound("task type", id)
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("get task type: %w", err))
	}
	normalizeTaskType(&tt)
	return &tt, nil
}

// ListTaskTypes lists types by name; archived ones only when asked.
func (db *DB) ListTaskTypes(ctx context.Context, includeArchived bool) ([]events.TaskType, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+taskTypeColumns+` FROM task_types tt
		WHERE $1 OR NOT tt.archived ORDER BY tt.name`, includeArchived)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list task types: %w", err))
	}
	out := []events.TaskType{}
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

// CreateTaskType defines a new type of work. The spec must be validated and
// its schema compiled by the caller.
func (db *DB) CreateTaskType(ctx context.Context, spec events.TaskTypeSpec, meta events.Meta) (*events.TaskType, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	tt, _, err := appendStream(ctx, db, db.pool, events.StreamTaskType, id.String(), nil,
		[]events.Payload{events.TaskTypeCreated{TaskTypeSpec: spec}}, meta, db.projector.TaskType, nil)
	if dup := (*events.DuplicateError)(nil); errors.As(err, &dup) {
		dup.Value = spec.Name
		if dup.Field == "alias" {
			dup.Value = spec.Alias
		}
	}
	return tt, err
}

// UpdateTaskType changes a type through decide (Update, Archive, Pause,
// Resume). The projector copies a change of its controls onto its open
// tasks in the same transaction (projections.Projector.TaskType).
func (db *DB) UpdateTaskType(ctx context.Context, id string, meta events.Meta, decide func(*events.TaskType) ([]events.Payload, error)) (*events.TaskType, error) {
	tt, err := db.GetTaskType(ctx, db.pool, id)
	if err != nil {
		return nil, err
	}
	ps, err := decide(tt)
	if err != nil {
		return nil, err
	}
	after, _, err := appendStream(ctx, db, db.pool, events.StreamTaskType, id, tt, ps, meta, db.projector.TaskType, nil)
	return after, err
}
