package ui

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

type dashboardData struct {
	Stats    *store.Stats
	Capacity *store.Capacity
	Activity *store.Activity
	TypeName map[string]string
	// Held are the task types whose tasks claims skip (paused) or ration
	// (limits), to be shown as such.
	Held  []events.TaskType
	Chart chart
}

func (u *UI) dashboard(c echo.Context) error {
	ctx := c.Request().Context()
	d := dashboardData{TypeName: map[string]string{}}
	var err error
	if d.Stats, err = u.db.Stats(ctx); err != nil {
		return u.fail(c, err)
	}
	if d.Capacity, err = u.db.CapacityTotals(ctx); err != nil {
		return u.fail(c, err)
	}
	if d.Activity, err = u.db.RecentActivity(ctx); err != nil {
		return u.fail(c, err)
	}
	types, err := u.db.ListTaskTypes(ctx, true)
	if err != nil {
		return u.fail(c, err)
	}
	for _, t := range types {
		d.TypeName[t.ID] = t.Name
		if !t.Archived && t.Gated() {
			d.Held = append(d.Held, t)
		}
	}
	d.Chart = minuteChart(d.Activity.PerMinute)
	return u.render(c, http.StatusOK, "dashboard", d)
}

// chart is the per-minute bar chart, laid out for an SVG: completed bars
// up from the middle line, failed bars down from it.
type chart struct {
	Width, Height, Mid int
	Bars               []chartBar
	Max                int
	Labels             []chartLabel
	Total              [2]int
}

type chartBar struct {
	X, Y, W, H int
	Fail       bool
	Title      string
}

type chartLabel struct {
	X    int
	Text string
}

func minuteChart(ms []store.MinuteCount) chart {
	ch := chart{Width: 600, Height: 160, Mid: 80, Max: 1}
	for _, m := range ms {
		ch.Max = max(ch.Max, m.Completed, m.Failed)
		ch.Total[0] += m.Completed
		ch.Total[1] += m.Failed
	}
	if len(ms) == 0 {
		return ch
	}
	step := ch.Width / len(ms)
	half := ch.Mid - 12
	for i, m := range ms {
		x := i * step
		t := m.Minute.Format("15:04")
		if m.Completed > 0 {
			h := max(1, m.Completed*half/ch.Max)
			ch.Bars = append(ch.Bars, chartBar{X: x, Y: ch.Mid - h, W: step - 1, H: h, Title: fmt.Sprintf("%s: %d completed", t, m.Completed)})
		}
		if m.Failed > 0 {
			h := max(1, m.Failed*half/ch.Max)
			ch.Bars = append(ch.Bars, chartBar{X: x, Y: ch.Mid, W: step - 1, H: h, Fail: true, Title: fmt.Sprintf("%s: %d failed", t, m.Failed)})
		}
		if i%15 == 0 {
			ch.Labels = append(ch.Labels, chartLabel{X: x, Text: t})
		}
	}
	return ch
}
