package reactors

import (
	"testing"
	"time"
)

func TestPacer(t *testing.T) {
	t.Parallel()
	p := newPacer(5*time.Millisecond, 4)
	now := time.Unix(0, 0)
	for i := range 4 {
		if w := p.take(now); w != 0 {
			t.Fatalf("look %d of a burst waits %v", i+1, w)
		}
	}
	if w := p.take(now); w != 5*time.Millisecond {
		t.Fatalf("the 5th look at once waits %v, want 5ms", w)
	}
	// It waited; then a storm gets one look per interval.
	now = now.Add(5 * time.Millisecond)
	if w := p.take(now); w != 5*time.Millisecond {
		t.Fatalf("storm: waits %v, want 5ms", w)
	}
	// After a quiet spell the burst is back.
	now = now.Add(time.Second)
	for i := range 4 {
		if w := p.take(now); w != 0 {
			t.Fatalf("after a quiet spell look %d waits %v", i+1, w)
		}
	}
}
