package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/clawdbot/task-service/store"
)

// idempotencyHeader carries the key a client chose for a creating request
// (route.idempotent): the same key and body within a day answer the first
// answer again and do nothing; the same key with another request is a 422.
const idempotencyHeader = "Idempotency-Key"

// maxIdempotencyKey bounds a key; UUIDs and ULIDs fit many times over.
const maxIdempotencyKey = 255

// Replays say so in this header.
const replayedHeader = "Idempotent-Replayed"

// errNotKept rolls back a request whose answer is not kept (not a 2xx).
var errNotKept = errors.New("answer not kept")

// idempotent runs a creating route's handler, when the request has an
// Idempotency-Key, inside one transaction that first locks the key, then
// reads its answer: a known key is answered from there without running the
// handler. Otherwise the handler's writes join the transaction
// (store.ContextWithTx) and a 2xx answer is recorded in it: what the
// request created and its answer commit together, or neither does.
func (s *Server) idempotent(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		key := c.Request().Header.Get(idempotencyHeader)
		if key == "" {
			return next(c)
		}
		if err := checkIdempotencyKey(key); err != nil {
			return err
		}
		body, err := readBody(c)
		if err != nil {
			return err
		}
		c.Request().Body = io.NopCloser(bytes.NewReader(body))
		hash := requestHash(c.Request(), body)
		principal := claimsOf(c).Subject
		// Requests with one key on this instance wait here, not on the
		// database lock: a connection each would starve the one running.
		unlock := s.keyLocks.lock(principal + "\x00" + key)
		defer unlock()

		ctx := c.Request().Context()
		var stored *store.Answer
		var handlerErr error
		rec := &recorder{ResponseWriter: c.Response().Writer}
		err = s.db.WithTx(ctx, func(tx pgx.Tx) error {
			var err error
			if stored, err = s.db.LockIdempotencyKey(ctx, tx, principal, key); err != nil {
				return err
			}
			if stored != nil {
				return errNotKept
			}
			handlerErr = rec.run(c, store.ContextWithTx(ctx, tx), next)
			if handlerErr != nil || rec.status/100 != 2 {
				return errNotKept
			}
			return s.db.SaveIdempotencyKey(ctx, tx, principal, key, store.Answer{RequestHash: hash, Status: rec.status, Body: rec.body.Bytes()})
		})
		switch {
		case stored != nil:
			return replay(c, stored, hash)
		case handlerErr != nil:
			return handlerErr
		case err != nil && !errors.Is(err, errNotKept):
			rec.forget(c)
			return err
		}
		return rec.send()
	}
}

// checkIdempotencyKey allows 1 to 255 printable ASCII characters.
func checkIdempotencyKey(key string) error {
	if len(key) > maxIdempotencyKey {
		return &httpError{status: http.StatusBadRequest, body: ErrorBody{Code: "validation_failed",
			Message: "is longer than 255 characters", Field: idempotencyHeader}}
	}
	for i := range len(key) {
		if key[i] < 0x21 || key[i] > 0x7e {
			return &httpError{status: http.StatusBadRequest, body: ErrorBody{Code: "validation_failed",
				Message: "must be printable ASCII without spaces (a UUID, say)", Field: idempotencyHeader}}
		}
	}
	return nil
}

// requestHash is what makes two requests with one key the same request:
// the method, the path and query, and the body, byte for byte.
func requestHash(r *http.Request, body []byte) []byte {
	h := sha256.New()
	io.WriteString(h, r.Method+" "+r.URL.RequestURI()+"\n")
	h.Write(body)
	return h.Sum(nil)
}

// replay answers a known key: its first answer, or 422 when the key came
// with another request.
func replay(c echo.Context, a *store.Answer, hash []byte) error {
	if !bytes.Equal(a.RequestHash, hash) {
		return &httpError{status: http.StatusUnprocessableEntity, body: ErrorBody{Code: "idempotency_key_reused",
			Message: "this Idempotency-Key came with another request (method, path or body) within the last 24 hours; use a new key for a new request",
			Field:   idempotencyHeader}}
	}
	c.Response().Header().Set(replayedHeader, "true")
	return c.Blob(a.Status, echo.MIMEApplicationJSONCharsetUTF8, a.Body)
}

// recorder holds a handler's answer until its transaction has committed:
// headers go to the real writer's map, status and body wait.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// run runs next on c, its request under ctx, recording what it answers.
func (r *recorder) run(c echo.Context, ctx context.Context, next echo.HandlerFunc) error {
	req, resp := c.Request(), c.Response()
	c.SetRequest(req.WithContext(ctx))
	resp.Writer = r
	defer func() {
		resp.Writer = r.ResponseWriter
		c.SetRequest(req)
	}()
	return next(c)
}

// send writes the recorded answer.
func (r *recorder) send() error {
	r.ResponseWriter.WriteHeader(r.status)
	_, err := r.ResponseWriter.Write(r.body.Bytes())
	return err
}

// forget drops the recorded answer, so that the error handler can answer
// instead (the transaction did not commit).
func (r *recorder) forget(c echo.Context) {
	resp := c.Response()
	resp.Committed, resp.Status, resp.Size = false, 0, 0
	r.body.Reset()
	r.status = 0
}

// keyLocks serialises the requests of one key on this instance.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

func (k *keyLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// housekeepingEvery is how often each instance deletes the idempotency
// answers older than a day and the Telegram updates older than a week, and
// folds the finished minutes' counters (a few batches of rows each;
// instances skip each other's).
const housekeepingEvery = 10 * time.Minute

// housekeep does all three at start and then every housekeepingEvery until
// ctx ends.
func (s *Server) housekeep(ctx context.Context) {
	t := time.NewTicker(housekeepingEvery)
	defer t.Stop()
	for {
		n, err := s.db.PruneIdempotencyKeys(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn().Err(err).Msg("cannot prune idempotency keys; will try again")
		case n > 0:
			s.log.Debug().Int64("deleted", n).Msg("pruned idempotency keys older than a day")
		}
		if n, err := s.db.PruneTelegramUpdates(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("cannot prune handled Telegram updates; will try again")
		} else if n > 0 {
			s.log.Debug().Int64("deleted", n).Msg("pruned handled Telegram updates older than a week")
		}
		if n, err := s.db.FoldTaskMinutes(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("cannot fold the task minute counters; will try again")
		} else if n > 0 {
			s.log.Debug().Int64("rows", n).Msg("folded the finished minutes' counters")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
