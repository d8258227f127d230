package ui

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

type eventsData struct {
	Q      url.Values
	Rows   []eventRow
	Stream string // the stream's query: the same filters
	After  string // the newest position shown: the stream goes on from it
	Types  []string
	Worker *workerPicker
	Error  string
}

// backlog is how many events the page starts with.
const backlog = 100

// eventFilter reads the page's filters as the stream reads them.
func eventFilter(q url.Values) (store.LogFilter, url.Values, error) {
	var f store.LogFilter
	stream := url.Values{}
	for _, v := range q["type"] {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t == "" {
				continue
			}
			if !events.KnownType(t) {
				return f, nil, events.Invalid("type", "unknown event type %q", t)
			}
			f.Types = append(f.Types, t)
		}
	}
	if len(f.Types) > 0 {
		stream.Set("type", strings.Join(f.Types, ","))
	}
	var err error
	if v := strings.TrimSpace(q.Get("task")); v != "" {
		if f.StreamID, err = uuidField("task", v); err != nil {
			return f, nil, err
		}
		stream.Set("stream_id", f.StreamID)
	}
	if v := q.Get("worker"); v != "" {
		if f.WorkerID, err = uuidField("worker", v); err != nil {
			return f, nil, err
		}
		stream.Set("worker_id", f.WorkerID)
	}
	return f, stream, nil
}

func (u *UI) events(c echo.Context) error {
	ctx := c.Request().Context()
	q, err := u.resolveFilter(ctx, c.QueryParams(), "worker")
	d := eventsData{Q: q, Types: events.Types()}
	var f store.LogFilter
	var stream url.Values
	if err == nil {
		f, stream, err = eventFilter(q)
	}
	var perr error
	if d.Worker, perr = u.workerPicker(ctx, "worker", "f-worker", "any", q.Get("worker"), ""); perr != nil {
		return u.fail(c, perr)
	}
	if err != nil {
		fe, status, ferr := errorsOf(err)
		if ferr != nil {
			return u.fail(c, ferr)
		}
		for _, m := range fe {
			d.Error = m
		}
		d.Worker.Error = fe["worker"]
		return u.render(c, status, "events", d)
	}
	evs, err := u.db.RecentEvents(ctx, backlog, f)
	if err != nil {
		return u.fail(c, err)
	}
	views, err := u.api.EventViews(ctx, evs)
	if err != nil {
		return u.fail(c, err)
	}
	d.Rows = eventRows(views)
	if len(evs) > 0 {
		d.After = evs[0].Position().String()
	} else {
		d.After = events.Position{}.String()
	}
	d.Stream = stream.Encode()
	return u.render(c, http.StatusOK, "events", d)
}
