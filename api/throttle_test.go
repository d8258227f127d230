package api

import (
	"testing"
	"time"
)

// The bucket's arithmetic: burst, refill, the wait it reports, refunds.
func TestLimiter(t *testing.T) {
	t.Parallel()
	l := newLimiter(3, 2*time.Second)
	now := time.Unix(1_000_000, 0)
	for i := range 3 {
		if _, ok := l.take("k", now); !ok {
			t.Fatalf("take %d of the burst refused", i+1)
		}
	}
	wait, ok := l.take("k", now)
	if ok || wait != 2*time.Second {
		t.Fatalf("empty bucket: got ok=%v wait=%s, want refused for 2s", ok, wait)
	}
	if wait, ok := l.take("k", now.Add(1500*time.Millisecond)); ok || wait != 500*time.Millisecond {
		t.Fatalf("1.5 s later: ok=%v wait=%s, want refused for 500ms", ok, wait)
	}
	if _, ok := l.take("k", now.Add(2*time.Second)); !ok {
		t.Fatal("2 s later one token is back")
	}
	if _, ok := l.take("other", now); !ok {
		t.Fatal("keys are independent")
	}
	l.refund("k", now.Add(2*time.Second))
	if _, ok := l.take("k", now.Add(2*time.Second)); !ok {
		t.Fatal("a refunded token can be taken again")
	}
	if _, ok := l.take("k", now.Add(time.Hour)); !ok {
		t.Fatal("refilled after an hour")
	}
	l.refund("k", now.Add(time.Hour))
	l.refund("k", now.Add(time.Hour))
	for i := range 3 {
		if _, ok := l.take("k", now.Add(time.Hour)); !ok {
			t.Fatalf("take %d", i+1)
		}
	}
	if _, ok := l.take("k", now.Add(time.Hour)); ok {
		t.Fatal("refunds never exceed the burst")
	}
}

func TestRateLimitedRoundsUp(t *testing.T) {
	t.Parallel()
	for wait, want := range map[time.Duration]int{0: 1, 10 * time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, 29 * time.Second: 29} {
		if got := rateLimited(wait, "x").(*httpError).retryAfter; got != want {
			t.Errorf("wait %s: Retry-After %d, want %d", wait, got, want)
		}
	}
}
