package client

import "context"

type idempotencyKey struct{}

// WithIdempotencyKey makes the requests sent with ctx carry the header
// Idempotency-Key: key. The service answers a request with a key it has
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
