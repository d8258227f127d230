package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/clawdbot/task-service/events"
)

// UploadData streams body as one file of the task's data. size is the
// body's length, or -1 when unknown (then it is sent chunked).
func (c *Client) UploadData(ctx context.Context, taskID, dataType, filename, contentType string, body io.Reader, size int64) (*events.TaskData, error) {
	q := url.Values{"data_type": {dataType}, "filename": {filename}}
	path := "/api/v1/worker/tasks/" + url.PathEscape(taskID) + "/data?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if size >= 0 {
		req.ContentLength = size
		// The server refuses a size over the room before it reads the
		// body; waiting for its go-ahead means that answer is read, never
		// lost to a reset while the body is still being written.
		req.Header.Set("Expect", "100-continue")
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	var out []events.TaskData
	if err := c.sendUntimed(req, &out); err != nil {
		return nil, err
	}
	if len(out) != 1 {
		return nil, fmt.Errorf("upload: the server answered %d files for one", len(out))
	}
	return &out[0], nil
}

// SendRaw sends a prepared request (any body) with the token and decodes
// the envelope's data into out.
func (c *Client) SendRaw(req *http.Request, out any) error { return c.send(req, out) }

// sendUntimed is send without the client's overall timeout: a large
// upload takes as long as it takes; ctx bounds it.
func (c *Client) sendUntimed(req *http.Request, out any) error {
	hc := *c.http
	hc.Timeout = 0
	cc := &Client{base: c.base, http: &hc, tok: c.Token()}
	return cc.send(req, out)
}

func (c *Client) send(req *http.Request, out any) error {
	if tok := c.Token(); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read response: %w", req.Method, req.URL.Path, err)
	}
	env := struct {
		Success bool   `json:"success"`
		Data    any    `json:"data"`
		Error   *Error `json:"error"`
	}{Data: out}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s %s: %d, not an API envelope: %.200s", req.Method, req.URL.Path, resp.StatusCode, raw)
	}
	if !env.Success || resp.StatusCode >= 400 {
		e := env.Error
		if e == nil {
			e = &Error{Code: "unknown", Message: http.StatusText(resp.StatusCode)}
		}
		e.Status = resp.StatusCode
		return e
	}
	return nil
}

// MyTaskData lists the data of the worker's task and of its earlier attempts.
func (c *Client) MyTaskData(ctx context.Context, taskID string) ([]events.TaskData, error) {
	var out []events.TaskData
	err := c.Do(ctx, http.MethodGet, "/api/v1/worker/tasks/"+url.PathEscape(taskID)+"/data", nil, &out)
	return out, err
}

// TaskData lists a task's data (admin).
func (c *Client) TaskData(ctx context.Context, taskID string) ([]events.TaskData, error) {
	var out []events.TaskData
	err := c.Do(ctx, http.MethodGet, "/api/v1/admin/workers/tasks/"+url.PathEscape(taskID)+"/data", nil, &out)
	return out, err
}

// AdminDataPath and WorkerDataPath are the download routes of one file.
func AdminDataPath(taskID, dataID string) string {
	return "/api/v1/admin/workers/tasks/" + url.PathEscape(taskID) + "/data/" + url.PathEscape(dataID)
}

func WorkerDataPath(taskID, dataID string) string {
	return "/api/v1/worker/tasks/" + url.PathEscape(taskID) + "/data/" + url.PathEscape(dataID)
}

// Download opens a download route (AdminDataPath, WorkerDataPath); a
// redirect to a presigned URL is followed without sending the token there.
// The caller closes the body.
func (c *Client) Download(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token())
	// Go drops Authorization on a redirect to another host; to the same
	// host with another path it keeps it, which S3 would reject next to
	// the presigned query. So redirects are followed here, bare.
	hc := *c.http
	hc.Timeout = 0 // a large download takes as long as it takes; ctx bounds it
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusFound || resp.StatusCode == http.StatusTemporaryRedirect {
		loc := resp.Header.Get("Location")
		resp.Body.Close()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
		if err != nil {
			return nil, err
		}
		if resp, err = hc.Do(req); err != nil {
			return nil, err
		}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var env struct{ Error *Error }
		if json.Unmarshal(raw, &env) == nil && env.Error != nil {
			env.Error.Status = resp.StatusCode
			return nil, env.Error
		}
		return nil, &Error{Status: resp.StatusCode, Code: "download_failed", Message: fmt.Sprintf("%.200s", raw)}
	}
	return resp.Body, nil
}
