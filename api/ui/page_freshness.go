package ui

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// The Freshness pages: the rules, a new rule, and a rule's page with its
// keys (each one's age and next due), actions, edit form and watchlist.
// They read through the store and act through the API's commands.

type freshnessData struct {
	Rules []*events.FreshnessRule
	Types map[string]string
}

func (u *UI) freshnessRules(c echo.Context) error {
	list, err := u.db.ListFreshnessRules(c.Request().Context())
	if err != nil {
		return u.fail(c, err)
	}
	types, err := u.typeNames(c)
	if err != nil {
		return u.fail(c, err)
	}
	return u.render(c, http.StatusOK, "freshness", freshnessData{Rules: list, Types: types})
}

// freshnessForm is the create and edit form, and the rule's page.
type freshnessForm struct {
	Rule   *events.FreshnessRule // nil when creating
	Types  []events.TaskType
	Form   url.Values
	Errors formErrors
	// On the rule's page: a page of keys (after: the last key of the
	// previous page), the next page's start, and the rule's type's name.
	Keys     []keyRow
	After    string
	NextFrom string
	TypeName string
}

// keyRow is one key as the page shows it.
type keyRow struct {
	store.FreshnessKeyView
	Age, Next string
}

const freshnessKeysPage = 200

func freshnessValues(r *events.FreshnessRule) url.Values {
	v := url.Values{}
	t := events.DefaultThresholds
	v.Set("params_template", `{"ticker": "{{key}}"}`)
	v.Set("title_template", "Crawl {{key}}")
	v.Set("max_age", "6h")
	v.Set("rising_boost", strconv.FormatFloat(events.DefaultRisingBoost, 'g', -1, 64))
	if r != nil {
		v.Set("name", r.Name)
		v.Set("task_type_id", r.TaskTypeID)
		v.Set("title_template", r.TitleTemplate)
		v.Set("params_template", r.ParamsTemplate)
		v.Set("max_age", r.MaxAge().String())
		v.Set("rising_boost", strconv.FormatFloat(r.RisingBoost, 'g', -1, 64))
		t = r.Thresholds
	}
	for name, f := range map[string]float64{"thresholds.urgent": t.Urgent, "thresholds.high": t.High, "thresholds.medium": t.Medium} {
		v.Set(name, strconv.FormatFloat(f, 'g', -1, 64))
	}
	return v
}

// freshnessRequest turns the form into the API's request (keys only when
// creating).
func freshnessRequest(f url.Values, withKeys bool) (api.FreshnessRuleRequest, error) {
	get := func(k string) string { return strings.TrimSpace(f.Get(k)) }
	req := api.FreshnessRuleRequest{FreshnessRuleEdit: api.FreshnessRuleEdit{Name: get("name"), TaskTypeID: get("task_type_id"),
		TitleTemplate: get("title_template"), MaxAge: get("max_age")}}
	if p := get("params_template"); p != "" {
		raw, _ := json.Marshal(p) // a string: the API parses its text and names what is wrong
		req.ParamsTemplate = raw
	}
	num := func(field string) (float64, error) {
		n, err := strconv.ParseFloat(get(field), 64)
		if err != nil {
			return 0, events.Invalid(field, "must be a number")
		}
		return n, nil
	}
	var t events.PriorityThresholds
	var err error
	if t.Urgent, err = num("thresholds.urgent"); err != nil {
		return req, err
	}
	if t.High, err = num("thresholds.high"); err != nil {
		return req, err
	}
	if t.Medium, err = num("thresholds.medium"); err != nil {
		return req, err
	}
	req.Thresholds = &t
	boost, err := num("rising_boost")
	if err != nil {
		return req, err
	}
	req.RisingBoost = &boost
	if withKeys {
		if req.Keys, err = events.ParseFreshnessKeys(f.Get("keys")); err != nil {
			return req, err
		}
	}
	return req, nil
}

func (u *UI) newFreshnessRule(c echo.Context) error {
	ts, err := u.db.ListTaskTypes(c.Request().Context(), false)
	if err != nil {
		return u.fail(c, err)
	}
	form := freshnessValues(nil)
	form.Set("keys", "NVDA:5\nINTC:1\n")
	return u.render(c, http.StatusOK, "freshness_new", freshnessForm{Types: ts, Form: form})
}

func (u *UI) createFreshnessRule(c echo.Context) error {
	ctx := c.Request().Context()
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, events.Invalid("form", "could not be read"))
	}
	var r *events.FreshnessRule
	req, err := freshnessRequest(form, true)
	if err == nil {
		r, err = u.api.CreateFreshnessRule(ctx, req, actor(c))
	}
	if err != nil {
		fe, status, ferr := keyErrorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		ts, lerr := u.db.ListTaskTypes(ctx, false)
		if lerr != nil {
			return u.fail(c, lerr)
		}
		return u.render(c, status, "freshness_new", freshnessForm{Types: ts, Form: form, Errors: fe})
	}
	return c.Redirect(http.StatusSeeOther, "/freshness/"+r.ID)
}

// keyErrorsOf places a command's error at its form field; an error on one
// key (keys[3].weight) shows at the keys box.
func keyErrorsOf(err error) (formErrors, int, error) {
	fe, status, ferr := errorsOf(err)
	if ferr != nil {
		return nil, 0, ferr
	}
	for k, msg := range fe {
		if strings.HasPrefix(k, "keys[") {
			fe["keys"] = k + ": " + msg
		}
	}
	return fe, status, nil
}

func (u *UI) findFreshnessRule(c echo.Context) (*events.FreshnessRule, error) {
	id, err := uuidField("id", c.Param("id"))
	if err != nil {
		return nil, events.NotFound("freshness rule", c.Param("id"))
	}
	return u.db.GetFreshnessRule(c.Request().Context(), id)
}

// freshnessPage renders a rule's page with form (the edit form's values)
// and errors at their fields.
func (u *UI) freshnessPage(c echo.Context, r *events.FreshnessRule, status int, form url.Values, fe formErrors) error {
	ctx := c.Request().Context()
	after := c.QueryParam("after")
	keys, err := u.db.FreshnessKeys(ctx, r.ID, after, freshnessKeysPage)
	if err != nil {
		return u.fail(c, err)
	}
	types, err := u.typeNames(c)
	if err != nil {
		return u.fail(c, err)
	}
	d := freshnessForm{Rule: r, Form: form, Errors: fe, After: after, TypeName: types[r.TaskTypeID]}
	if form.Get("keys") == "" {
		all := make([]events.FreshnessKey, len(keys))
		for i, k := range keys {
			all[i] = events.FreshnessKey{Key: k.Key, Weight: k.Weight, Rising: k.Rising}
		}
		if len(keys) < r.KeyCount {
			// The box replaces the whole list: fill it only when it holds all.
			all = nil
		}
		form.Set("keys", events.FormatFreshnessKeys(all))
	}
	now := u.db.Now()
	for _, k := range keys {
		row := keyRow{FreshnessKeyView: k, Age: "never completed", Next: "—"}
		if k.AgeSeconds != nil {
			row.Age = agoText(time.Duration(*k.AgeSeconds * float64(time.Second)))
		}
		switch {
		case k.CurrentTaskID != nil:
			row.Next = "when its task ends"
		case k.DueAt == nil:
			row.Next = "paused"
		case !k.DueAt.After(now):
			row.Next = "due now"
		default:
			row.Next = "in " + strings.TrimSuffix(agoText(k.DueAt.Sub(now)), " ago")
		}
		d.Keys = append(d.Keys, row)
	}
	if len(keys) == freshnessKeysPage {
		d.NextFrom = keys[len(keys)-1].Key
	}
	return u.render(c, status, "freshness_rule", d)
}

func (u *UI) freshnessRule(c echo.Context) error {
	r, err := u.findFreshnessRule(c)
	if err != nil {
		return u.fail(c, err)
	}
	return u.freshnessPage(c, r, http.StatusOK, freshnessValues(r), nil)
}

func (u *UI) updateFreshnessRule(c echo.Context) error {
	r, err := u.findFreshnessRule(c)
	if err != nil {
		return u.fail(c, err)
	}
	form, err := c.FormParams()
	if err != nil {
		return u.fail(c, events.Invalid("form", "could not be read"))
	}
	req, err := freshnessRequest(form, false)
	if err == nil {
		req.TaskTypeID = ""
		_, err = u.api.UpdateFreshnessRule(c.Request().Context(), r.ID, req, actor(c))
	}
	if err != nil {
		fe, status, ferr := keyErrorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		return u.freshnessPage(c, r, status, form, fe)
	}
	return c.Redirect(http.StatusSeeOther, "/freshness/"+r.ID)
}

// freshnessAction runs pause, resume, delete or keys from the rule's page.
func (u *UI) freshnessAction(c echo.Context) error {
	r, err := u.findFreshnessRule(c)
	if err != nil {
		return u.fail(c, err)
	}
	ctx, meta := c.Request().Context(), actor(c)
	switch c.Param("action") {
	case "pause":
		_, err = u.db.PauseFreshnessRule(ctx, r.ID, c.FormValue("reason"), meta)
	case "resume":
		_, err = u.db.ResumeFreshnessRule(ctx, r.ID, meta)
	case "delete":
		if err = u.db.DeleteFreshnessRule(ctx, r.ID, meta); err == nil {
			return c.Redirect(http.StatusSeeOther, "/freshness")
		}
	case "keys":
		var keys []events.FreshnessKey
		if keys, err = events.ParseFreshnessKeys(c.FormValue("keys")); err == nil {
			_, err = u.api.ReplaceFreshnessKeys(ctx, r.ID, keys, meta)
		}
		if err != nil {
			fe, status, ferr := keyErrorsOf(err)
			if ferr != nil {
				return u.fail(c, ferr)
			}
			form := freshnessValues(r)
			form.Set("keys", c.FormValue("keys"))
			return u.freshnessPage(c, r, status, form, fe)
		}
	default:
		return u.notFound(c, "no such action")
	}
	if err != nil {
		fe, status, ferr := keyErrorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		return u.freshnessPage(c, r, status, freshnessValues(r), formErrors{"action": fe[firstKey(fe)]})
	}
	return c.Redirect(http.StatusSeeOther, "/freshness/"+r.ID)
}
