package events_test

import (
	"testing"
	"time"

	"github.com/clawdbot/task-service/events"
)

// Lockouts double while they follow each other within a day, up to the
// maximum, and start over after a quiet day; a password change ends one.
func TestLockOutGrows(t *testing.T) {
	t.Parallel()
	pol := events.LockoutPolicy{Base: time.Minute, Max: 10 * time.Minute, Memory: 24 * time.Hour}
	u := &events.User{ID: "u", Active: true}
	now := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	apply := func(ps []events.Payload) events.UserLockedOut {
		p := ps[0].(events.UserLockedOut)
		u.Apply(events.Envelope{Payload: p, OccurredAt: now, Version: u.Version + 1})
		return p
	}
	for i, want := range []int{60, 120, 240, 480, 600, 600} {
		p := apply(u.LockOut(10, "203.0.113.9", pol, now))
		if p.Seconds != want || p.Level != i+1 {
			t.Fatalf("lockout %d: %ds level %d, want %ds level %d", i+1, p.Seconds, p.Level, want, i+1)
		}
		if left, locked := u.LockedAt(now.Add(time.Second)); !locked || left != time.Duration(want-1)*time.Second {
			t.Fatalf("lockout %d: locked=%v left=%s", i+1, locked, left)
		}
		now = now.Add(time.Duration(want+30) * time.Second)
		if _, locked := u.LockedAt(now); locked {
			t.Fatalf("lockout %d still holds after its time", i+1)
		}
	}
	now = now.Add(25 * time.Hour)
	if p := apply(u.LockOut(10, "", pol, now)); p.Level != 1 || p.Seconds != 60 {
		t.Fatalf("after a quiet day: level %d, %ds", p.Level, p.Seconds)
	}
	epoch := u.TokenEpoch
	u.Apply(events.Envelope{Payload: events.UserPasswordChanged{By: events.PasswordByAdmin}, OccurredAt: now, Version: u.Version + 1})
	if _, locked := u.LockedAt(now); locked || u.Lockouts != 0 || u.TokenEpoch != epoch+1 {
		t.Fatalf("a password change ends the lockout and revokes tokens: %+v", u)
	}
}
