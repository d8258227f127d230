package ui

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

type typesData struct {
	Types []events.TaskType
}

func (u *UI) types(c echo.Context) error {
	ts, err := u.db.ListTaskTypes(c.Request().Context(), true)
	if err != nil {
		return u.fail(c, err)
	}
	return u.render(c, http.StatusOK, "types", typesData{Types: ts})
}

// typeForm is the create/edit form of a task type.
type typeForm struct {
	Type   *events.TaskType    // nil when creating
	Usage  *store.TypeUsage    // its limits' use now, when it exists
	LLM    *store.TypeDayUsage // its LLM usage today against its budgets
	Form   url.Values
	Errors formErrors
}

func typeValues(tt *events.TaskType) url.Values {
	v := url.Values{}
	if tt == nil {
		v.Set("max_retries", strconv.Itoa(events.DefaultMaxRetries))
		v.Set("param_schema", "{\n  \"type\": \"object\",\n  \"properties\": {}\n}")
		return v
	}
	v.Set("name", tt.Name)
	v.Set("label", tt.Label)
	v.Set("description", tt.Description)
	v.Set("sop", tt.SOP)
	v.Set("param_schema", formJSON(tt.ParamSchema))
	v.Set("alias", tt.Alias)
	v.Set("params_template", string(tt.ParamsTemplate))
	v.Set("max_retries", strconv.Itoa(tt.MaxRetries))
	v.Set("timeout_seconds", strconv.Itoa(tt.TimeoutSeconds))
	v.Set("retry_backoff_seconds", strconv.Itoa(tt.RetryBackoffSeconds))
	if tt.MaxInProgress != nil {
		v.Set("max_in_progress", strconv.Itoa(*tt.MaxInProgress))
	}
	if tt.RateLimit != nil {
		v.Set("rate_limit_count", strconv.Itoa(tt.RateLimit.Count))
		v.Set("rate_limit_per", tt.RateLimit.Per)
	}
	v.Set("concurrency_key", tt.ConcurrencyKey)
	if tt.MaxInProgressPerKey != nil {
		v.Set("max_in_progress_per_key", strconv.Itoa(*tt.MaxInProgressPerKey))
	}
	if tt.DailyTokenBudget != nil {
		v.Set("daily_token_budget", strconv.FormatInt(*tt.DailyTokenBudget, 10))
	}
	if tt.DailyCostBudgetUSD != nil {
		v.Set("daily_cost_budget_usd", strconv.FormatFloat(*tt.DailyCostBudgetUSD, 'f', -1, 64))
	}
	return v
}

// typeRequest reads the form; numbers that do not parse are the field's
// error.
func typeRequest(f url.Values) (api.TaskTypeRequest, error) {
	req := api.TaskTypeRequest{Name: strings.TrimSpace(f.Get("name")), Label: strings.TrimSpace(f.Get("label")),
		Description: f.Get("description"), SOP: f.Get("sop")}
	schema, err := formValueJSON("param_schema", f.Get("param_schema"))
	if err != nil {
		return req, err
	}
	req.ParamSchema = schema
	req.Alias = strings.TrimSpace(f.Get("alias"))
	if req.ParamsTemplate, err = formValueJSON("params_template", f.Get("params_template")); err != nil {
		return req, err
	}
	num := func(field string) (int, error) {
		v := strings.TrimSpace(f.Get(field))
		if v == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, events.Invalid(field, "must be a whole number")
		}
		return n, nil
	}
	if strings.TrimSpace(f.Get("max_retries")) != "" {
		n, nerr := num("max_retries")
		if nerr != nil {
			return req, nerr
		}
		req.MaxRetries = &n
	}
	if req.TimeoutSeconds, err = num("timeout_seconds"); err != nil {
		return req, err
	}
	if req.RetryBackoffSeconds, err = num("retry_backoff_seconds"); err != nil {
		return req, err
	}
	// Limits: an empty field is no limit.
	optional := func(field string) (*int, error) {
		if strings.TrimSpace(f.Get(field)) == "" {
			return nil, nil
		}
		n, err := num(field)
		return &n, err
	}
	if req.MaxInProgress, err = optional("max_in_progress"); err != nil {
		return req, err
	}
	count, err := optional("rate_limit_count")
	if err != nil {
		return req, events.Invalid("rate_limit.count", "must be a whole number")
	}
	if per := strings.TrimSpace(f.Get("rate_limit_per")); count != nil || per != "" {
		req.RateLimit = &events.RateLimit{Per: per}
		if count != nil {
			req.RateLimit.Count = *count
		}
	}
	req.ConcurrencyKey = strings.TrimSpace(f.Get("concurrency_key"))
	if req.MaxInProgressPerKey, err = optional("max_in_progress_per_key"); err != nil {
		return req, err
	}
	// Budgets: an empty field is no budget.
	if v := strings.TrimSpace(f.Get("daily_token_budget")); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil {
			return req, events.Invalid("daily_token_budget", "must be a whole number of tokens")
		}
		req.DailyTokenBudget = &n
	}
	if v := strings.TrimSpace(f.Get("daily_cost_budget_usd")); v != "" {
		usd, perr := strconv.ParseFloat(v, 64)
		if perr != nil {
			return req, events.Invalid("daily_cost_budget_usd", "must be an amount in US dollars, like 25 or 7.50")
		}
		req.DailyCostBudgetUSD = &usd
	}
	return req, nil
}

func (u *UI) newType(c echo.Context) error {
	return u.render(c, http.StatusOK, "type_form", typeForm{Form: typeValues(nil)})
}

func (u *UI) createType(c echo.Context) error {
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, events.Invalid("form", "could not be read"))
	}
	req, err := typeRequest(form)
	var tt *events.TaskType
	if err == nil {
		tt, err = u.api.CreateTaskType(c.Request().Context(), req, actor(c))
	}
	if err != nil {
		fe, status, ferr := errorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		return u.render(c, status, "type_form", typeForm{Form: form, Errors: fe})
	}
	return c.Redirect(http.StatusSeeOther, "/types/"+tt.ID)
}

func (u *UI) typePage(c echo.Context) error {
	tt, err := u.findType(c)
	if err != nil {
		return u.fail(c, err)
	}
	usage, err := u.db.TypeUsage(c.Request().Context(), tt.ID)
	if err != nil {
		return u.fail(c, err)
	}
	llm, err := u.db.TypeUsageToday(c.Request().Context(), u.db.Pool(), tt.ID)
	if err != nil {
		return u.fail(c, err)
	}
	return u.render(c, http.StatusOK, "type_form", typeForm{Type: tt, Usage: usage, LLM: llm, Form: typeValues(tt)})
}

func (u *UI) findType(c echo.Context) (*events.TaskType, error) {
	id, err := uuidField("id", c.Param("id"))
	if err != nil {
		return nil, events.NotFound("task type", c.Param("id"))
	}
	return u.db.GetTaskType(c.Request().Context(), u.db.Pool(), id)
}

func (u *UI) updateType(c echo.Context) error {
	tt, err := u.findType(c)
	if err != nil {
		return u.fail(c, err)
	}
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, events.Invalid("form", "could not be read"))
	}
	req, err := typeRequest(form)
	if err == nil {
		_, err = u.api.UpdateTaskType(c.Request().Context(), tt.ID, req, actor(c))
	}
	if err != nil {
		fe, status, ferr := errorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		return u.render(c, status, "type_form", typeForm{Type: tt, Form: form, Errors: fe})
	}
	return c.Redirect(http.StatusSeeOther, "/types/"+tt.ID)
}

func (u *UI) archiveType(c echo.Context) error {
	tt, err := u.findType(c)
	if err != nil {
		return u.fail(c, err)
	}
	if _, err := u.api.ArchiveTaskType(c.Request().Context(), tt.ID, actor(c)); err != nil {
		fe, status, ferr := errorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		return u.render(c, status, "type_form", typeForm{Type: tt, Form: typeValues(tt), Errors: fe})
	}
	return c.Redirect(http.StatusSeeOther, "/types")
}

func (u *UI) pauseType(c echo.Context) error {
	return u.typeAction(c, func(tt *events.TaskType, reason string) error {
		_, err := u.api.PauseTaskType(c.Request().Context(), tt.ID, reason, actor(c))
		return err
	})
}

func (u *UI) resumeType(c echo.Context) error {
	return u.typeAction(c, func(tt *events.TaskType, reason string) error {
		_, err := u.api.ResumeTaskType(c.Request().Context(), tt.ID, reason, actor(c))
		return err
	})
}

// typeAction runs act on the type of the path with the form's reason, then
// shows the type again (with act's error on its form).
func (u *UI) typeAction(c echo.Context, act func(tt *events.TaskType, reason string) error) error {
	tt, err := u.findType(c)
	if err != nil {
		return u.fail(c, err)
	}
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, events.Invalid("form", "could not be read"))
	}
	if err := act(tt, form.Get("reason")); err != nil {
		fe, status, ferr := errorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		return u.render(c, status, "type_form", typeForm{Type: tt, Form: typeValues(tt), Errors: fe})
	}
	return c.Redirect(http.StatusSeeOther, "/types/"+tt.ID)
}
