package client

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"
)

type idempotencyKey struct{}

// WithIdempotencyKey makes the requests sent with ctx carry the header
// Idempotency-Key: key. The methods that create something send a key of
// their own when ctx has none (see create). The service answers a request with a key it has
// seen (same body, within 24 hours) with the first answer, doing nothing
// again: a caller that sends a creation again after a lost answer uses the
// same key (and the same ctx) every time.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idempotencyKey{}, key)
}

// IdempotencyKey is the key WithIdempotencyKey put on ctx, "" when none.
func IdempotencyKey(ctx context.Context) string {
	k, _ := ctx.Value(idempotencyKey{}).(string)
	return k
}

// createAttempts bounds how often a creating request is sent when no
// answer comes back; createBackoff is the wait before each repeat.
const createAttempts = 3

var createBackoff = []time.Duration{200 * time.Millisecond, time.Second}

// create sends a POST that creates something with an Idempotency-Key (the
// one ctx carries, else a new one) and, when no answer came back (the
// connection failed, a proxy answered), sends it again with the same key a
// few times: the service answers a repeat with its first answer, so a lost
// answer never makes two of anything. An API error is an answer: it is
// returned at once.
func (c *Client) create(ctx context.Context, path string, body, out any) (int, error) {
	if IdempotencyKey(ctx) == "" {
		ctx = WithIdempotencyKey(ctx, uuid.NewString())
	}
	var status int
	var err error
	for attempt := range createAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return 0, err
			case <-time.After(createBackoff[attempt-1]):
			}
		}
		status, err = c.DoStatus(ctx, http.MethodPost, path, body, out)
		var apiErr *Error
		if err == nil || errors.As(err, &apiErr) || ctx.Err() != nil {
			return status, err
		}
	}
	return status, err
}
