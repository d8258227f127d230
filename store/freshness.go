package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store/paramtemplate"
)

// FreshnessActor is the actor of the tasks freshness rules create.
const FreshnessActor = "freshness"

const freshnessRuleColumns = `r.id, r.spec, r.state, r.key_count, r.tasks_created, r.paused_reason, r.created_by,
 r.created_at, r.updated_at, r.version`

func scanFreshnessRule(row pgx.Row) (*events.FreshnessRule, error) {
	var r events.FreshnessRule
	var spec []byte
	if err := row.Scan(&r.ID, &spec, &r.State, &r.KeyCount, &r.TasksCreated, &r.PausedReason, &r.CreatedBy,
		&r.CreatedAt, &r.UpdatedAt, &r.Version); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(spec, &r.FreshnessSpec); err != nil {
		return nil, fmt.Errorf("freshness rule %s: spec: %w", r.ID, err)
	}
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return &r, nil
}

// GetFreshnessRule reads one rule; a *events.NotFoundError when there is none.
func (db *DB) GetFreshnessRule(ctx context.Context, id string) (*events.FreshnessRule, error) {
	return db.readFreshnessRule(ctx, db.pool, id, "")
}

func (db *DB) readFreshnessRule(ctx context.Context, q Querier, id, lock string) (*events.FreshnessRule, error) {
	if _, err := uuid.Parse(id); err != nil {
		return nil, events.NotFound("freshness rule", id)
	}
	r, err := scanFreshnessRule(q.QueryRow(ctx, `SELECT `+freshnessRuleColumns+` FROM freshness_rules r WHERE r.id = $1 `+lock, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, events.NotFound("freshness rule", id)
	}
	if err != nil {
		return nil, mapErr(fmt.Errorf("read freshness rule: %w", err))
	}
	return r, nil
}

// MaxFreshnessRules bounds the list (and the UI page).
const MaxFreshnessRules = 500

// ListFreshnessRules lists rules, newest first (at most MaxFreshnessRules).
func (db *DB) ListFreshnessRules(ctx context.Context) ([]*events.FreshnessRule, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+freshnessRuleColumns+` FROM freshness_rules r
		ORDER BY r.created_at DESC, r.id DESC LIMIT $1`, MaxFreshnessRules)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list freshness rules: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*events.FreshnessRule, error) { return scanFreshnessRule(r) })
	if err != nil {
		return nil, mapErr(fmt.Errorf("list freshness rules: %w", err))
	}
	if out == nil {
		out = []*events.FreshnessRule{}
	}
	return out, nil
}

// FreshnessKeyView is one watched key and its state.
type FreshnessKeyView struct {
	Key    string `json:"key"`
	Weight int    `json:"weight"`
	Rising bool   `json:"rising"`
	// LastCompletedAt is when the key's newest task completed; null: never.
	LastCompletedAt *time.Time `json:"last_completed_at"`
	// AgeSeconds is how long ago that was; null: never.
	AgeSeconds *float64 `json:"age_seconds"`
	// LastFailedAt is when the key's newest task that did not complete
	// (failed or cancelled) ended: the next is due a max age after the
	// later of the two.
	LastFailedAt *time.Time `json:"last_failed_at"`
	// CurrentTaskID is the key's task pending or in progress, if any.
	CurrentTaskID *string `json:"current_task_id"`
	// DueAt is when the next task is created: null while a task is open or
	// the rule is paused; at or before now when it is due.
	DueAt   *time.Time `json:"due_at"`
	AddedAt time.Time  `json:"added_at"`
}

// MaxFreshnessKeyPage bounds a page of keys.
const MaxFreshnessKeyPage = 1000

// FreshnessKeys lists a rule's keys by key, a page at a time (after: the
// last key of the previous page).
func (db *DB) FreshnessKeys(ctx context.Context, ruleID, after string, limit int) ([]FreshnessKeyView, error) {
	if _, err := db.GetFreshnessRule(ctx, ruleID); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > MaxFreshnessKeyPage {
		limit = 100
	}
	now := db.Now()
	rows, err := db.pool.Query(ctx, `SELECT key, weight, rising, last_completed_at, last_failed_at, current_task_id::text, due_at, added_at
		FROM freshness_keys WHERE rule_id = $1 AND key > $2 ORDER BY key LIMIT $3`, ruleID, after, limit)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list freshness keys: %w", err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FreshnessKeyView, error) {
		var k FreshnessKeyView
		err := r.Scan(&k.Key, &k.Weight, &k.Rising, &k.LastCompletedAt, &k.LastFailedAt, &k.CurrentTaskID, &k.DueAt, &k.AddedAt)
		for _, p := range []**time.Time{&k.LastCompletedAt, &k.LastFailedAt, &k.DueAt} {
			if *p != nil {
				u := (*p).UTC()
				*p = &u
			}
		}
		k.AddedAt = k.AddedAt.UTC()
		if k.LastCompletedAt != nil {
			age := now.Sub(*k.LastCompletedAt).Seconds()
			k.AgeSeconds = &age
		}
		return k, err
	})
	if err != nil {
		return nil, mapErr(fmt.Errorf("list freshness keys: %w", err))
	}
	if out == nil {
		out = []FreshnessKeyView{}
	}
	return out, nil
}

// freshnessTemplates are a rule's parsed templates.
type freshnessTemplates struct {
	title  *paramtemplate.Title
	params *paramtemplate.Template
}

// parseFreshnessTemplates parses a spec's templates; errors name the field.
func parseFreshnessTemplates(spec events.FreshnessSpec) (*freshnessTemplates, error) {
	title, err := paramtemplate.ParseTitle(spec.TitleTemplate)
	if err != nil {
		return nil, events.Invalid("title_template", "%v", err)
	}
	params, err := paramtemplate.Parse(spec.ParamsTemplate)
	if err != nil {
		return nil, events.Invalid("params_template", "%v", err)
	}
	for field, names := range map[string][]string{"title_template": title.Names(), "params_template": params.Names()} {
		for _, n := range names {
			if n != paramtemplate.Key {
				return nil, events.Invalid(field, "has {{%s}}; a rule fills {{%s}} only", n, paramtemplate.Key)
			}
		}
	}
	return &freshnessTemplates{title: title, params: params}, nil
}

// render makes a key's title and params.
func (t *freshnessTemplates) render(key string) (string, json.RawMessage, error) {
	vars := map[string]string{paramtemplate.Key: key}
	title, err := t.title.Render(vars)
	if err != nil {
		return "", nil, events.Invalid("title_template", "%v", err)
	}
	params, err := t.params.Render(vars)
	if err != nil {
		return "", nil, events.Invalid("params_template", "%v", err)
	}
	return title, params, nil
}

// sampleKey is the key a rule's templates are tried with, to tell a
// template its type refuses (refused whatever the key) from a key that
// renders params the type refuses.
const sampleKey = "KEY"

// checkFreshness validates a spec (defaults filled) and, when keys is not
// nil, a watchlist: the type exists and is not archived, the templates
// parse, and every key renders params the type's schema accepts. Every
// error names the field at fault.
func (db *DB) checkFreshness(ctx context.Context, q Querier, spec *events.FreshnessSpec, keys []events.FreshnessKey, check ParamsCheck) error {
	if err := spec.Validate(db.freshnessMinAge); err != nil {
		return err
	}
	typeID, err := uuid.Parse(spec.TaskTypeID)
	if err != nil {
		return events.Invalid("task_type_id", "is not a UUID")
	}
	spec.TaskTypeID = typeID.String()
	tt, err := db.GetTaskType(ctx, q, spec.TaskTypeID)
	if errors.Is(err, events.ErrNotFound) {
		return events.UnknownReference("task_type_id", "task type", spec.TaskTypeID)
	}
	if err != nil {
		return err
	}
	if tt.Archived {
		return events.Unusable("task_type_id", "task type %s is archived", tt.Name)
	}
	tpl, err := parseFreshnessTemplates(*spec)
	if err != nil {
		return err
	}
	if keys != nil {
		if err := events.ValidateKeys(keys); err != nil {
			return err
		}
	}
	fits := func(key string) error {
		_, params, err := tpl.render(key)
		if err == nil && check != nil {
			err = check(tt, params)
		}
		return err
	}
	for i, k := range keys {
		err := fits(k.Key)
		if err == nil {
			continue
		}
		if fits(sampleKey) != nil {
			break // the template is at fault, whatever the key
		}
		return events.Invalid(fmt.Sprintf("keys[%d].key", i), "%q renders params its task type refuses: %v", k.Key, err)
	}
	if err := fits(sampleKey); err != nil && (len(keys) == 0 || fits(keys[0].Key) != nil) {
		return events.Invalid("params_template", "renders params its task type refuses: %v", err)
	}
	return nil
}

// CreateFreshnessRule defines a rule with its watchlist.
func (db *DB) CreateFreshnessRule(ctx context.Context, spec events.FreshnessSpec, keys []events.FreshnessKey, check ParamsCheck, meta events.Meta) (*events.FreshnessRule, error) {
	if keys == nil {
		keys = []events.FreshnessKey{}
	}
	if err := db.checkFreshness(ctx, db.pool, &spec, keys, check); err != nil {
		return nil, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	r, _, err := appendStream(ctx, db, db.pool, events.StreamFreshnessRule, id.String(), nil,
		events.NewFreshnessRule(spec, keys, adminID(meta)), meta, db.projector.FreshnessRule, nil)
	return r, err
}

func adminID(meta events.Meta) string {
	if meta.Actor.Kind == events.ActorAdmin {
		return meta.Actor.ID
	}
	return ""
}

// FreshnessDecide decides a command on the locked current state of a rule.
type FreshnessDecide func(r *events.FreshnessRule) ([]events.Payload, error)

// ChangeFreshnessRule runs one command on rule id in one transaction: lock
// the row, decide, append.
func (db *DB) ChangeFreshnessRule(ctx context.Context, id string, meta events.Meta, decide FreshnessDecide) (*events.FreshnessRule, error) {
	var after *events.FreshnessRule
	err := db.WithTx(ctx, func(tx pgx.Tx) error {
		r, err := db.readFreshnessRule(ctx, tx, id, "FOR UPDATE")
		if err != nil {
			return err
		}
		ps, err := decide(r)
		if err != nil {
			return err
		}
		after, _, err = appendStream(ctx, db, tx, events.StreamFreshnessRule, id, r, ps, meta, db.projector.FreshnessRule, nil)
		return err
	})
	return after, err
}

// UpdateFreshnessRule edits rule id: edit changes a copy of its spec (the
// API decodes the request over it), which is then checked like a new one
// against the rule's current keys. The task type cannot change.
func (db *DB) UpdateFreshnessRule(ctx context.Context, id string, edit func(*events.FreshnessSpec) error, check ParamsCheck, meta events.Meta) (*events.FreshnessRule, error) {
	return db.ChangeFreshnessRule(ctx, id, meta, func(r *events.FreshnessRule) ([]events.Payload, error) {
		spec := r.FreshnessSpec
		if err := edit(&spec); err != nil {
			return nil, err
		}
		if typeID, err := uuid.Parse(spec.TaskTypeID); err != nil || typeID.String() != r.TaskTypeID {
			return nil, events.Invalid("task_type_id", "cannot change (the keys' tasks are found by it): create a new rule")
		}
		keys, err := db.ruleKeys(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		if err := db.checkFreshness(ctx, db.pool, &spec, keys, check); err != nil {
			return nil, err
		}
		return []events.Payload{events.FreshnessRuleUpdated{FreshnessSpec: spec, By: adminID(meta)}}, nil
	})
}

// ruleKeys reads a rule's watchlist.
func (db *DB) ruleKeys(ctx context.Context, id string) ([]events.FreshnessKey, error) {
	rows, err := db.pool.Query(ctx, `SELECT key, weight, rising FROM freshness_keys WHERE rule_id = $1 ORDER BY key`, id)
	if err != nil {
		return nil, mapErr(fmt.Errorf("read freshness keys: %w", err))
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByPos[events.FreshnessKey])
	if err != nil {
		return nil, mapErr(fmt.Errorf("read freshness keys: %w", err))
	}
	return keys, nil
}

// ReplaceFreshnessKeys makes keys rule id's whole watchlist: keys that stay
// keep their state, new ones are due at once, the others stop being watched.
func (db *DB) ReplaceFreshnessKeys(ctx context.Context, id string, keys []events.FreshnessKey, check ParamsCheck, meta events.Meta) (*events.FreshnessRule, error) {
	if keys == nil {
		keys = []events.FreshnessKey{}
	}
	return db.ChangeFreshnessRule(ctx, id, meta, func(r *events.FreshnessRule) ([]events.Payload, error) {
		spec := r.FreshnessSpec
		if err := db.checkFreshness(ctx, db.pool, &spec, keys, check); err != nil {
			return nil, err
		}
		return []events.Payload{events.FreshnessKeysReplaced{Keys: keys, By: adminID(meta)}}, nil
	})
}

// PauseFreshnessRule, ResumeFreshnessRule and DeleteFreshnessRule are the
// admin's actions.
func (db *DB) PauseFreshnessRule(ctx context.Context, id, reason string, meta events.Meta) (*events.FreshnessRule, error) {
	return db.ChangeFreshnessRule(ctx, id, meta, func(r *events.FreshnessRule) ([]events.Payload, error) {
		return r.Pause(adminID(meta), reason)
	})
}

func (db *DB) ResumeFreshnessRule(ctx context.Context, id string, meta events.Meta) (*events.FreshnessRule, error) {
	return db.ChangeFreshnessRule(ctx, id, meta, func(r *events.FreshnessRule) ([]events.Payload, error) {
		return r.Resume(adminID(meta))
	})
}

func (db *DB) DeleteFreshnessRule(ctx context.Context, id string, meta events.Meta) error {
	_, err := db.ChangeFreshnessRule(ctx, id, meta, func(r *events.FreshnessRule) ([]events.Payload, error) {
		return []events.Payload{events.FreshnessRuleDeleted{By: adminID(meta)}}, nil
	})
	return err
}

// NextFreshnessDue is the earliest due time of a watched key; nil when none.
func (db *DB) NextFreshnessDue(ctx context.Context) (*time.Time, error) {
	var next *time.Time
	err := db.pool.QueryRow(ctx, `SELECT min(due_at) FROM freshness_keys WHERE due_at IS NOT NULL`).Scan(&next)
	if err != nil {
		return nil, mapErr(fmt.Errorf("next due freshness key: %w", err))
	}
	return next, nil
}

// FreshDecision is one key's task created by CreateStaleTasks, or the
// rule's pause when it no longer makes valid tasks.
type FreshDecision struct {
	RuleID   string
	Key      string
	TaskID   string
	Priority events.Priority
	Reason   string
	Paused   bool
}

// CreateStaleTasks creates a task for each key due now, up to limit keys
// per rule. It reads the rules with keys due (an index range of
// freshness_keys: only due keys are in it) and handles each rule in a
// transaction of its own: the rule's row is locked FOR UPDATE SKIP LOCKED
// (another instance holding it handles that rule), its due keys read, and
// their tasks created with their unique keys (whose index refuses a second
// open task for a key, whatever writes it) together with one
// freshness_rule.task_created event per key that says why.
func (db *DB) CreateStaleTasks(ctx context.Context, limit int, check ParamsCheck) ([]FreshDecision, error) {
	now := db.Now()
	rows, err := db.pool.Query(ctx, `SELECT DISTINCT rule_id::text FROM
		(SELECT rule_id FROM freshness_keys WHERE due_at <= $1 ORDER BY due_at LIMIT $2) due`, now, limit)
	if err != nil {
		return nil, mapErr(fmt.Errorf("freshness: due rules: %w", err))
	}
	ruleIDs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, mapErr(fmt.Errorf("freshness: due rules: %w", err))
	}
	var out []FreshDecision
	var errs []error
	for _, id := range ruleIDs {
		var ds []FreshDecision
		err := db.WithTx(ctx, func(tx pgx.Tx) (err error) {
			ds, err = db.createStaleForRule(ctx, tx, id, now, limit, check)
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("freshness rule %s: %w", id, err))
			continue
		}
		out = append(out, ds...)
	}
	return out, errors.Join(errs...)
}

type dueKey struct {
	key           events.FreshnessKey
	lastCompleted *time.Time
}

func (db *DB) createStaleForRule(ctx context.Context, tx pgx.Tx, id string, now time.Time, limit int, check ParamsCheck) ([]FreshDecision, error) {
	r, err := db.readFreshnessRule(ctx, tx, id, "FOR UPDATE SKIP LOCKED")
	if errors.Is(err, events.ErrNotFound) {
		return nil, nil // another instance holds it, or it was deleted
	}
	if err != nil || r.State != events.FreshnessActive {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT key, weight, rising, last_completed_at FROM freshness_keys
		WHERE rule_id = $1 AND due_at <= $2 ORDER BY due_at, key LIMIT $3`, id, now, limit)
	if err != nil {
		return nil, mapErr(fmt.Errorf("read due keys: %w", err))
	}
	due, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dueKey, error) {
		var d dueKey
		err := row.Scan(&d.key.Key, &d.key.Weight, &d.key.Rising, &d.lastCompleted)
		if d.lastCompleted != nil {
			u := d.lastCompleted.UTC()
			d.lastCompleted = &u
		}
		return d, err
	})
	if err != nil || len(due) == 0 {
		return nil, mapErr(err)
	}
	meta := events.Meta{Actor: events.System(FreshnessActor), CorrelationID: id}
	pause := func(reason string) ([]FreshDecision, error) {
		ps := []events.Payload{events.FreshnessRulePaused{Reason: reason, Auto: true}}
		_, _, err := appendStream(ctx, db, tx, events.StreamFreshnessRule, id, r, ps, meta, db.projector.FreshnessRule, nil)
		return []FreshDecision{{RuleID: id, Paused: true, Reason: reason}}, err
	}
	tt, err := db.GetTaskType(ctx, tx, r.TaskTypeID)
	switch {
	case errors.Is(err, events.ErrNotFound):
		return pause("its task type no longer exists")
	case err != nil:
		return nil, err
	case tt.Archived:
		return pause(fmt.Sprintf("its task type %s is archived", tt.Name))
	}
	tpl, err := parseFreshnessTemplates(r.FreshnessSpec)
	if err != nil {
		return pause("its templates no longer parse: " + err.Error())
	}
	reqs := make([]createRequest, len(due))
	decisions := make([]events.FreshnessDecision, len(due))
	for i, d := range due {
		title, params, err := tpl.render(d.key.Key)
		if err == nil && check != nil {
			err = check(tt, params)
		}
		if err != nil {
			return pause(fmt.Sprintf("key %q no longer makes a valid task: %v", d.key.Key, err))
		}
		decisions[i] = r.Decide(d.key, d.lastCompleted, now)
		reqs[i] = createRequest{meta: meta, params: NewTaskParams{TaskType: tt, NewTaskParams: events.NewTaskParams{
			Title: title, Params: params, Priority: decisions[i].Priority,
			Description: "Created by freshness rule " + r.Name + ": " + decisions[i].Reason,
			UniqueKey:   events.FreshnessUniqueKey(id, d.key.Key),
		}}}
	}
	outs, err := db.createTasks(ctx, tx, reqs)
	if err != nil {
		return nil, err
	}
	var ps []events.Payload
	var out []FreshDecision
	var failed error
	for i, o := range outs {
		var dup *events.DuplicateTaskError
		switch {
		case errors.As(o.err, &dup):
			// An open task holds the key, which its row did not say: it
			// waits for that task.
			if _, err := tx.Exec(ctx, `UPDATE freshness_keys SET current_task_id = $3, due_at = NULL
				WHERE rule_id = $1 AND key = $2`, id, due[i].key.Key, dup.TaskID); err != nil {
				return nil, mapErr(fmt.Errorf("key %q: %w", due[i].key.Key, err))
			}
			continue
		case o.err != nil:
			if failed == nil {
				failed = fmt.Errorf("key %q no longer makes a valid task: %w", due[i].key.Key, o.err)
			}
			continue
		}
		d, k := decisions[i], due[i]
		p := events.FreshnessTaskCreated{Key: k.key.Key, TaskID: o.res.ID, Priority: d.Priority, Weight: k.key.Weight,
			Rising: k.key.Rising, Score: d.Score, LastCompletedAt: k.lastCompleted, Reason: d.Reason}
		if d.Age != nil {
			age := d.Age.Seconds()
			p.AgeSeconds = &age
		}
		ps = append(ps, p)
		out = append(out, FreshDecision{RuleID: id, Key: k.key.Key, TaskID: o.res.ID, Priority: d.Priority, Reason: d.Reason})
	}
	if failed != nil {
		// The keys created stay created, each with its decision; the rule
		// stops until an admin looks.
		ps = append(ps, events.FreshnessRulePaused{Reason: failed.Error(), Auto: true})
		out = append(out, FreshDecision{RuleID: id, Paused: true, Reason: failed.Error()})
	}
	if len(ps) == 0 {
		return nil, nil
	}
	_, _, err = appendStream(ctx, db, tx, events.StreamFreshnessRule, id, r, ps, meta, db.projector.FreshnessRule, nil)
	if err != nil {
		return nil, err
	}
	return slices.Clip(out), nil
}
