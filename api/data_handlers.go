package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
	"github.com/clawdbot/task-service/store/blob"
)

// DataConfig configures task data (uploads and downloads).
type DataConfig struct {
	// Store keeps the objects; without it the data routes answer 503.
	Store blob.Store
	// MaxFileBytes bounds one uploaded file (default 1 GiB).
	MaxFileBytes int64
	// MaxTaskBytes bounds all the data of one task (default 10 GiB).
	MaxTaskBytes int64
	// MaxTaskFiles bounds the number of files of one task (default 1000):
	// each is an event in the task's history and a row on its page.
	MaxTaskFiles int
	// URLTTL is how long a presigned download URL lasts (default 15 min).
	URLTTL time.Duration
}

func (c *DataConfig) defaults() {
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = 1 << 30
	}
	if c.MaxTaskBytes <= 0 {
		c.MaxTaskBytes = 10 << 30
	}
	if c.MaxTaskFiles <= 0 {
		c.MaxTaskFiles = 1000
	}
	if c.URLTTL <= 0 {
		c.URLTTL = 15 * time.Minute
	}
}

// MaxFilesPerRequest bounds the files (and, alike, the fields) of one
// multipart upload: each file is a transaction and an event, so one
// request's work stays bounded however small its parts are.
const MaxFilesPerRequest = 100

// dataDownloadPath is the admin download route, which the admin UI's links
// open with the session cookie.
const dataDownloadPath = "/api/v1/admin/workers/tasks/:id/data/:data_id"

// copyBuffers are the upload copy buffers: large enough that a 1 GiB body
// is a few thousand writes, pooled so that concurrent uploads cost a
// bounded, reused amount of memory.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// uploadData streams a request body (or each file of a multipart form) to
// the blob store, then records it. Every refusal that comes before the body
// is read closes the connection, so a large body is never read to be
// thrown away.
func (s *Server) uploadData(c echo.Context) error {
	// The server's write timeout counts from the request's start; a large
	// upload may take longer, so the deadlines move with the bytes instead.
	rc := http.NewResponseController(c.Response())
	_ = rc.SetWriteDeadline(time.Time{})
	c.Request().Body = &progressReader{r: c.Request().Body, rc: rc}
	err := s.upload(c)
	if err != nil {
		c.Response().Header().Set(echo.HeaderConnection, "close")
	}
	return err
}

func (s *Server) upload(c echo.Context) error {
	if s.cfg.Data.Store == nil {
		return unavailable("task data is not configured on this server")
	}
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	worker := claimsOf(c).Subject
	if _, err := s.db.CheckUpload(ctx, id, worker); err != nil {
		return err
	}
	mediaType, _, _ := mime.ParseMediaType(c.Request().Header.Get(echo.HeaderContentType))
	if mediaType == echo.MIMEMultipartForm {
		return s.uploadMultipart(c, id, worker)
	}
	dataType, filename := c.QueryParam("data_type"), c.QueryParam("filename")
	if err := events.ValidateDataType(dataType); err != nil {
		return err
	}
	if err := events.ValidateFilename(filename); err != nil {
		return err
	}
	limit, err := s.uploadLimit(ctx, id, dataType, filename)
	if err != nil {
		return err
	}
	if cl := c.Request().ContentLength; cl > limit {
		return s.tooLargeUpload(limit)
	}
	ct := c.Request().Header.Get(echo.HeaderContentType)
	d, err := s.storeUpload(c, upload{taskID: id, worker: worker, dataType: dataType, filename: filename,
		contentType: ct, body: c.Request().Body, limit: limit})
	if err != nil {
		return err
	}
	return ok(c, http.StatusCreated, []*events.TaskData{d})
}

// uploadMultipart stores each file part of a multipart/form-data body in
// turn. The data type is the data_type query parameter or a data_type field
// before the files. Each file is recorded as soon as it is complete: when a
// later part fails, the earlier ones stay. Every bound is checked before
// the part it refuses is read.
func (s *Server) uploadMultipart(c echo.Context, id, worker string) error {
	ctx := c.Request().Context()
	mr, err := c.Request().MultipartReader()
	if err != nil {
		return events.Invalid("body", "not a multipart/form-data body: %v", err)
	}
	dataType := c.QueryParam("data_type")
	var stored []*events.TaskData
	fields := 0
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return events.Invalid("body", "malformed multipart body: %v", err)
		}
		// Part.FileName would strip a path; the raw parameter is checked
		// instead, so a traversal is refused rather than rewritten.
		_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		filename, isFile := params["filename"]
		if !isFile {
			if part.FormName() != "data_type" {
				return events.Invalid(part.FormName(), "unknown form field; send data_type and files")
			}
			if fields++; fields > MaxFilesPerRequest {
				return events.Invalid("data_type", "is given more than %d times in one request", MaxFilesPerRequest)
			}
			v, _ := io.ReadAll(io.LimitReader(part, events.MaxDataTypeLen+1))
			dataType = string(v)
			continue
		}
		if len(stored) == MaxFilesPerRequest {
			return events.TooLarge("body", "a request may carry at most %d files (the first %d were stored); send the rest in another request",
				MaxFilesPerRequest, len(stored))
		}
		if err := events.ValidateDataType(dataType); err != nil {
			return err
		}
		if err := events.ValidateFilename(filename); err != nil {
			return err
		}
		limit, err := s.uploadLimit(ctx, id, dataType, filename)
		if err != nil {
			return err
		}
		d, err := s.storeUpload(c, upload{taskID: id, worker: worker, dataType: dataType, filename: filename,
			contentType: part.Header.Get(echo.HeaderContentType), body: part, limit: limit})
		if err != nil {
			return err
		}
		stored = append(stored, d)
	}
	if len(stored) == 0 {
		return events.Invalid("body", "no file in the multipart body")
	}
	return ok(c, http.StatusCreated, stored)
}

// uploadLimit is how many bytes the file dataType/filename may have: the
// per-file bound, or what is left of the task's bound if less. A new name
// on a task that has all the files it may have is refused (a name it has
// may be replaced).
func (s *Server) uploadLimit(ctx context.Context, taskID, dataType, filename string) (int64, error) {
	others, err := s.db.TaskDataUsage(ctx, s.db.Pool(), taskID, dataType, filename)
	if err != nil {
		return 0, err
	}
	if others.Files >= s.cfg.Data.MaxTaskFiles {
		return 0, events.TooLarge("body", "the task has %d files, at most %d per task (DATA_MAX_FILES_PER_TASK); uploading one of their names again replaces it",
			others.Files, s.cfg.Data.MaxTaskFiles)
	}
	return min(s.cfg.Data.MaxFileBytes, s.cfg.Data.MaxTaskBytes-others.Bytes), nil
}

// tooLargeUpload names the bound that a file of more than limit bytes (as
// uploadLimit gave it) breaks: the task's, when that was the smaller one.
func (s *Server) tooLargeUpload(limit int64) error {
	if limit < s.cfg.Data.MaxFileBytes {
		return events.TooLarge("body", "the task has room for %d more bytes of data (at most %d per task, DATA_MAX_TASK_BYTES)",
			max(limit, 0), s.cfg.Data.MaxTaskBytes)
	}
	return events.TooLarge("body", "a file may have at most %d bytes (DATA_MAX_BYTES)", s.cfg.Data.MaxFileBytes)
}

type upload struct {
	taskID, worker, dataType, filename, contentType string
	body                                            io.Reader
	limit                                           int64
}

// storeUpload streams one file into a pending object while hashing it,
// then records it: the object is completed under the task's row lock and
// the event appended in the same transaction. Any failure before that
// aborts the pending object, so nothing is left visible.
func (s *Server) storeUpload(c echo.Context, u upload) (*events.TaskData, error) {
	ctx := c.Request().Context()
	bs := s.cfg.Data.Store
	if u.contentType == "" || strings.HasPrefix(u.contentType, "multipart/") {
		u.contentType = blob.ContentTypeOf(u.filename)
	}
	key := events.DataKey(u.taskID, u.dataType, u.filename)
	w, err := bs.Create(ctx, key, u.contentType)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	bufp := copyBuffers.Get().(*[]byte)
	n, err := io.CopyBuffer(io.MultiWriter(w, h), io.LimitReader(u.body, u.limit+1), *bufp)
	copyBuffers.Put(bufp)
	if err != nil {
		_ = w.Abort(ctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &httpError{status: http.StatusBadRequest, body: ErrorBody{Code: "incomplete_body",
			Message: "the upload ended before its body was complete: " + err.Error(), Field: "body"}}
	}
	if n > u.limit {
		_ = w.Abort(ctx)
		return nil, s.tooLargeUpload(u.limit)
	}
	committed := false
	d, err := s.db.RecordDataUpload(ctx, store.DataUpload{
		TaskID: u.taskID, WorkerID: u.worker, DataType: u.dataType, Filename: u.filename, Key: key,
		Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), ContentType: u.contentType,
		NewID: uuid.Must(uuid.NewV7()).String(), MaxTaskBytes: s.cfg.Data.MaxTaskBytes, MaxTaskFiles: s.cfg.Data.MaxTaskFiles,
	}, actor(c, events.ActorWorker), func(ctx context.Context) error {
		committed = true
		return w.Commit(ctx)
	})
	if err != nil {
		if !committed {
			_ = w.Abort(ctx)
		} else {
			s.dropUnrecorded(ctx, key)
		}
		return nil, err
	}
	return d, nil
}

// dropUnrecorded removes an object completed for an event that did not
// commit, unless an earlier event names its key (a replacement; then
// taskctl data verify reports the mismatch). The orphan sweep would catch
// it too; this only saves it the wait.
func (s *Server) dropUnrecorded(ctx context.Context, key string) {
	ctx = context.WithoutCancel(ctx)
	indexed, err := s.db.IndexedKeys(ctx, []string{key})
	if err != nil || indexed[key] {
		s.log.Warn().Str("key", key).Msg("task data: an object was completed but its event failed; run taskctl data verify")
		return
	}
	if err := s.cfg.Data.Store.Delete(ctx, key); err != nil {
		s.log.Warn().Err(err).Str("key", key).Msg("task data: could not remove an unrecorded object; the orphan sweep will")
	}
}

// listTaskData: an admin lists a task's data.
func (s *Server) listTaskData(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if _, err := s.db.GetTask(ctx, s.db.Pool(), id); err != nil {
		return err
	}
	d, err := s.db.ListTaskData(ctx, id)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, d)
}

// downloadTaskData: an admin downloads one object of a task.
func (s *Server) downloadTaskData(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	dataID, err := pathID(c, "data_id")
	if err != nil {
		return err
	}
	d, err := s.db.GetTaskData(c.Request().Context(), dataID)
	if err != nil {
		return err
	}
	if d.TaskID != id {
		return events.NotFound("data", dataID)
	}
	return s.serveData(c, d)
}

// workerLineage is the worker's task :id, its earlier attempts and its inputs' tasks, whose
// data the worker may read; 403 unless the worker holds (or held) the task.
func (s *Server) workerLineage(c echo.Context) ([]string, error) {
	id, err := pathID(c, "id")
	if err != nil {
		return nil, err
	}
	ctx := c.Request().Context()
	t, err := s.db.GetTask(ctx, s.db.Pool(), id)
	if err != nil {
		return nil, err
	}
	if !t.HeldBy(claimsOf(c).Subject) {
		return nil, events.ErrForbidden
	}
	ids, err := s.db.TaskLineage(ctx, id)
	if err != nil {
		return nil, err
	}
	inputs, err := s.db.TaskInputs(ctx, t)
	for _, in := range inputs {
		ids = append(ids, in.TaskID)
	}
	return ids, err
}

// listMyTaskData: a worker lists its task's data and its earlier attempts'.
func (s *Server) listMyTaskData(c echo.Context) error {
	ids, err := s.workerLineage(c)
	if err != nil {
		return err
	}
	d, err := s.db.ListTaskData(c.Request().Context(), ids...)
	if err != nil {
		return err
	}
	return ok(c, http.StatusOK, d)
}

// downloadMyTaskData: a worker downloads data of its task or of an earlier attempt.
func (s *Server) downloadMyTaskData(c echo.Context) error {
	ids, err := s.workerLineage(c)
	if err != nil {
		return err
	}
	dataID, err := pathID(c, "data_id")
	if err != nil {
		return err
	}
	d, err := s.db.GetTaskData(c.Request().Context(), dataID)
	if err != nil {
		return err
	}
	if !slices.Contains(ids, d.TaskID) {
		return events.NotFound("data", dataID)
	}
	return s.serveData(c, d)
}

// downloadPolicy is the Content-Security-Policy of a download: should a
// browser render one after all, it runs nothing and loads nothing, in an
// origin of its own.
const downloadPolicy = "default-src 'none'; sandbox"

// attachment is the Content-Disposition of a download: saved, never shown
// in place, under its name (the upload checked that name's characters).
func attachment(filename string) string {
	if v := mime.FormatMediaType("attachment", map[string]string{"filename": filename}); v != "" {
		return v
	}
	return "attachment"
}

// passiveTypes are the media types a download keeps: browsers show or save
// them but never run them, not even as <script src> or a stylesheet.
var passiveTypes = map[string]bool{
	"text/plain": true, "text/csv": true, "text/tab-separated-values": true,
	"application/json": true, "application/x-ndjson": true, "application/jsonl": true,
	"application/octet-stream": true, "application/gzip": true, "application/zip": true,
	"application/x-tar": true, "application/zstd": true, "application/x-parquet": true,
	"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true, "image/avif": true,
	"audio/mpeg": true, "audio/ogg": true, "audio/wav": true, "video/mp4": true, "video/webm": true,
}

// SetDownloadHeaders makes an answer a download that no browser runs,
// whatever is in it: an attachment named filename, of a passive type (see
// servedContentType), never sniffed, and sandboxed should it be rendered.
// The admin UI's downloads use it too.
func SetDownloadHeaders(h http.Header, filename, contentType string) {
	h.Set(echo.HeaderContentType, servedContentType(contentType))
	h.Set(echo.HeaderContentDisposition, attachment(filename))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", downloadPolicy)
}

// servedContentType is the type a download is served with: the uploader's
// own type when it is passive, and application/octet-stream for anything a
// browser could run or render with scripts (JavaScript, HTML, SVG, XML,
// CSS, PDF, or a type nobody knows). The worker chose the stored type; the
// admin's browser must not trust it.
func servedContentType(stored string) string {
	mt, params, err := mime.ParseMediaType(stored)
	if err != nil || !passiveTypes[mt] {
		return "application/octet-stream"
	}
	if cs := params["charset"]; strings.HasPrefix(mt, "text/") && cs != "" {
		return mime.FormatMediaType(mt, map[string]string{"charset": cs})
	}
	return mt
}

// serveData redirects to a presigned URL when the store has them (S3), and
// otherwise streams the object with Range and conditional-request support.
// Either way the answer is an attachment of a passive type.
func (s *Server) serveData(c echo.Context, d *events.TaskData) error {
	bs := s.cfg.Data.Store
	if bs == nil {
		return unavailable("task data is not configured on this server")
	}
	ctx := c.Request().Context()
	url, err := bs.PresignGet(ctx, d.Key, attachment(d.Filename), servedContentType(d.ContentType), s.cfg.Data.URLTTL)
	if err == nil {
		return c.Redirect(http.StatusFound, url)
	}
	if !errors.Is(err, blob.ErrNoPresign) {
		return err
	}
	rc, err := bs.Open(ctx, d.Key)
	if errors.Is(err, blob.ErrNotFound) {
		s.log.Error().Str("key", d.Key).Str("data_id", d.ID).Msg("task data: an indexed object is missing; run taskctl data verify")
		return events.NotFound("object of data", d.ID)
	}
	if err != nil {
		return err
	}
	defer rc.Close()
	h := c.Response().Header()
	SetDownloadHeaders(h, d.Filename, d.ContentType)
	h.Set("ETag", `"`+d.SHA256+`"`)
	h.Set("X-Checksum-Sha256", d.SHA256)
	w := &progressWriter{ResponseWriter: c.Response(), rc: http.NewResponseController(c.Response())}
	_ = w.rc.SetWriteDeadline(time.Now().Add(stallTimeout))
	if rs, ok := rc.(io.ReadSeeker); ok {
		http.ServeContent(w, c.Request(), "", d.UploadedAt, rs)
		return nil
	}
	h.Set(echo.HeaderContentLength, strconv.FormatInt(d.Size, 10))
	w.WriteHeader(http.StatusOK)
	_, err = io.Copy(w, rc)
	return err
}

// stallTimeout is how long a streamed body may make no progress: a large
// upload or download may run for many minutes, but not stand still.
const stallTimeout = 60 * time.Second

// progressReader pushes the connection's read deadline forward as bytes
// arrive (at most once a second, so it costs nothing per read).
type progressReader struct {
	r     io.ReadCloser
	rc    *http.ResponseController
	moved time.Time
}

func (p *progressReader) Read(b []byte) (int, error) {
	if now := time.Now(); now.Sub(p.moved) > time.Second {
		_ = p.rc.SetReadDeadline(now.Add(stallTimeout))
		p.moved = now
	}
	return p.r.Read(b)
}

func (p *progressReader) Close() error { return p.r.Close() }

// progressWriter does the same for the write deadline of a download.
type progressWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	moved time.Time
}

func (p *progressWriter) Write(b []byte) (int, error) {
	if now := time.Now(); now.Sub(p.moved) > time.Second {
		_ = p.rc.SetWriteDeadline(now.Add(stallTimeout))
		p.moved = now
	}
	return p.ResponseWriter.Write(b)
}
