package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// History, the event log and the live tail.

// Actor is who caused an event.
type Actor struct {
	Kind events.ActorKind `json:"kind"`
	ID   string           `json:"id"`
	Name string           `json:"name,omitempty"`
}

// TaskAt reads task id as it was at `at` (the fold of its events up to
// then); a 404 *Error when it did not exist yet.
func (c *Client) TaskAt(ctx context.Context, id string, at time.Time) (*events.Task, error) {
	var out events.Task
	path := adminBase + "/tasks/" + url.PathEscape(id) + "?at=" + url.QueryEscape(at.UTC().Format(time.RFC3339Nano))
	return &out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// TaskChain reads the retry lineage task id belongs to, original to latest.
func (c *Client) TaskChain(ctx context.Context, id string) (*store.Chain, error) {
	var out store.Chain
	return &out, c.Do(ctx, http.MethodGet, adminBase+"/tasks/"+url.PathEscape(id)+"/chain", nil, &out)
}

// EventQuery selects events of the log; zero values do not filter.
type EventQuery struct {
	// After is a position ("" is the start for Events, the live end for
	// Stream and Tail; "0" is always the start).
	After string
	// Limit is the page size for Events (1..1000, default 100).
	Limit    int
	Types    []string
	StreamID string
	// WorkerID keeps the events about one user: naming it as worker_id,
	// caused by it, or of its own stream.
	WorkerID string
}

func (q EventQuery) values(withAfter bool) url.Values {
	v := url.Values{}
	if withAfter && q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit > 0 {
		v.Set("limit", fmt.Sprint(q.Limit))
	}
	if len(q.Types) > 0 {
		v.Set("type", strings.Join(q.Types, ","))
	}
	if q.StreamID != "" {
		v.Set("stream_id", q.StreamID)
	}
	if q.WorkerID != "" {
		v.Set("worker_id", q.WorkerID)
	}
	return v
}

// EventPage is one page of the log.
type EventPage struct {
	Events []Event `json:"events"`
	// Next is the After of the following page.
	Next string `json:"next"`
}

// Events reads one page of the log in consumer order.
func (c *Client) Events(ctx context.Context, q EventQuery) (*EventPage, error) {
	var out EventPage
	path := "/api/v1/admin/events"
	if v := q.values(true); len(v) > 0 {
		path += "?" + v.Encode()
	}
	return &out, c.Do(ctx, http.MethodGet, path, nil, &out)
}

// StreamToken is a short-lived token that opens the event stream as ?token=.
type StreamToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// StreamToken gets a token for the event stream (for browsers, which cannot
// send an Authorization header with EventSource).
func (c *Client) StreamToken(ctx context.Context) (*StreamToken, error) {
	var out StreamToken
	return &out, c.Do(ctx, http.MethodPost, "/api/v1/admin/events/stream-token", nil, &out)
}

// StreamError is the event the server sent before closing the stream:
// Event "error" (such as "too slow: disconnected; reconnect with
// Last-Event-ID"), or "auth_expired" when the login ended (it expired, or
// the user was deactivated, got a new password or lost the admin role):
// reconnecting needs a new login.
type StreamError struct{ Event, Message string }

func (e *StreamError) Error() string { return "event stream: " + e.Message }

// LoginEnded reports whether the stream ended with its login.
func (e *StreamError) LoginEnded() bool { return e.Event == "auth_expired" }

// ErrStreamEnded: the server closed the stream (shutting down, say).
var ErrStreamEnded = errors.New("event stream ended by the server")

// maxSSELine bounds one line of the stream (an event with a large payload).
const maxSSELine = 16 << 20

// Stream opens the live tail once and calls fn for each event until the
// stream ends, ctx ends or fn returns an error. q.After (a position) is sent
// as Last-Event-ID; "" starts at the live end. It returns the last position
// the server confirmed (pass it as After to resume) and why it stopped:
// *StreamError, ErrStreamEnded, an *Error for a refused request, fn's error
// or a network error.
func (c *Client) Stream(ctx context.Context, q EventQuery, fn func(Event) error) (last string, err error) {
	last = q.After
	path := "/api/v1/admin/events/stream"
	if v := q.values(false); len(v) > 0 {
		path += "?" + v.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return last, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if q.After != "" {
		req.Header.Set("Last-Event-ID", q.After)
	}
	if tok := c.Token(); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	// A stream lasts as long as it lasts: no client timeout.
	hc := &http.Client{Transport: c.http.Transport, CheckRedirect: c.http.CheckRedirect, Jar: c.http.Jar}
	resp, err := hc.Do(req)
	if err != nil {
		return last, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return last, responseError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxSSELine)
	var kind string
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 { // dispatch
			k, d := kind, data.Bytes()
			kind = ""
			if len(d) == 0 {
				continue
			}
			if k == "error" || k == "auth_expired" {
				return last, &StreamError{Event: k, Message: string(d)}
			}
			var e Event
			if err := json.Unmarshal(d, &e); err != nil {
				return last, fmt.Errorf("event stream: decode event after %s: %w", last, err)
			}
			data.Reset()
			if err := fn(e); err != nil {
				return last, err
			}
			continue
		}
		if line[0] == ':' {
			continue // comment: heartbeat
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			last = string(value)
		case "event":
			kind = string(value)
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(value)
		}
	}
	if err := sc.Err(); err != nil {
		return last, err
	}
	return last, ErrStreamEnded
}

// TailOptions configures Tail.
type TailOptions struct {
	EventQuery
	// OnReconnect, when set, hears why the stream stopped and when Tail
	// resumes from after.
	OnReconnect func(err error, after string, delay time.Duration)
	// MaxBackoff caps the wait between reconnects (default 10 s).
	MaxBackoff time.Duration
}

// Tail follows the stream forever: after any disconnect (a network error,
// a server restart, "too slow") it reconnects with Last-Event-ID and resumes
// exactly after the last event it delivered, waiting longer after each
// failure in a row. It returns when ctx ends (nil), fn fails (its error),
// the server refuses the request (an *Error other than 503: a bad filter,
// an expired login) or ends the stream with its login (a *StreamError).
func (c *Client) Tail(ctx context.Context, opts TailOptions, fn func(Event) error) error {
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 10 * time.Second
	}
	q := opts.EventQuery
	failures := 0
	for {
		delivered := false
		last, err := c.Stream(ctx, q, func(e Event) error {
			delivered = true
			if err := fn(e); err != nil {
				return &callbackError{err}
			}
			return nil
		})
		if ctx.Err() != nil {
			return nil
		}
		var cbErr *callbackError
		if errors.As(err, &cbErr) {
			return cbErr.err
		}
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status != http.StatusServiceUnavailable {
			return err
		}
		var streamErr *StreamError
		if errors.As(err, &streamErr) && streamErr.LoginEnded() {
			return err
		}
		q.After = last
		if delivered || errors.As(err, &streamErr) {
			failures = 0
		}
		delay := backoff(failures, opts.MaxBackoff)
		failures++
		if opts.OnReconnect != nil {
			opts.OnReconnect(err, last, delay)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

// callbackError carries fn's error through Stream, so Tail tells it apart
// from the connection's.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }
func (e *callbackError) Unwrap() error { return e.err }

// backoff is 0 for the first retry (a too-slow client catches up at once),
// then doubles from 250 ms up to max.
func backoff(failures int, max time.Duration) time.Duration {
	if failures == 0 {
		return 0
	}
	d := 250 * time.Millisecond << min(failures-1, 10)
	return min(d, max)
}

// responseError reads an error envelope from a response that is not 200.
func responseError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var env struct {
		Error *Error `json:"error"`
	}
	if json.Unmarshal(raw, &env) != nil || env.Error == nil {
		return &Error{Status: resp.StatusCode, Code: "unknown", Message: http.StatusText(resp.StatusCode)}
	}
	env.Error.Status = resp.StatusCode
	return env.Error
}
