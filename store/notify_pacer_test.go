package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pace runs commits (offsets from a start after a quiet spell, in order)
// through a notifyPacer as Notifier.Run does, and returns how long each
// commit waited for a NOTIFY and how many went out.
func pace(interval time.Duration, commits []time.Duration) (waits []time.Duration, sends int) {
	return paceCarrying(interval, commits, false)
}

// paceCarrying is pace where, with carrying, each commit is a create that
// asks to carry its NOTIFY first, as DB.carryNotify does, and carries it
// when the pacer lets it (its commit at the same instant).
func paceCarrying(interval time.Duration, commits []time.Duration, carrying bool) (waits []time.Duration, sends int) {
	start := time.Unix(1_000_000, 0)
	p := newNotifyPacer(interval)
	var unannounced []time.Duration
	send := func(at time.Time) {
		p.sending(at)
		sends++
		for _, c := range unannounced {
			waits = append(waits, at.Sub(start)-c)
		}
		unannounced = nil
	}
	for _, c := range commits {
		now := start.Add(c)
		for p.pending && !p.due.After(now) {
			send(p.due)
		}
		if carrying && p.carry(now) {
			p.carried(now, now)
			sends++
			for _, c := range append(unannounced, c) {
				waits = append(waits, now.Sub(start)-c)
			}
			unannounced = nil
			continue
		}
		p.commit(now)
		unannounced = append(unannounced, c)
		if !p.due.After(now) {
			send(now)
		}
	}
	if p.pending {
		send(p.due)
	}
	return waits, sends
}

func every(spacing, total time.Duration) []time.Duration {
	var out []time.Duration
	for c := time.Duration(0); c < total; c += spacing {
		out = append(out, c)
	}
	return out
}

// TestNotifyPacer: a commit after a quiet moment is announced at once, so
// tasks created one at a time (bench-wake's 15 ms apart) wake other
// instances without waiting; commits close together share one NOTIFY per
// interval, so however commits fall an instance sends at most one NOTIFY
// per quiet moment plus one per interval.
func TestNotifyPacer(t *testing.T) {
	const interval = 50 * time.Millisecond
	waits, sends := pace(interval, []time.Duration{0})
	require.Equal(t, []time.Duration{0}, waits, "one commit after a quiet spell: at once")
	require.Equal(t, 1, sends)

	waits, sends = pace(interval, every(15*time.Millisecond, time.Second))
	require.Equal(t, len(waits), sends, "commits 15 ms apart: one NOTIFY each")
	require.Equal(t, time.Duration(0), maxOf(waits), "and none waits")

	// A busy instance: a commit every 100 µs for a second, then a pause,
	// then one more.
	burst := append(every(100*time.Microsecond, time.Second), time.Second+100*time.Millisecond)
	waits, sends = pace(interval, burst)
	require.LessOrEqual(t, sends, 1+20+1, "a second of commits: one NOTIFY per interval (and the first)")
	require.Equal(t, time.Duration(0), waits[0], "the first commit of the burst is announced at once")
	require.LessOrEqual(t, maxOf(waits), interval, "no commit waits more than an interval")
	require.Equal(t, time.Duration(0), waits[len(waits)-1], "after a pause, at once again")

	// The bound holds for any spacing.
	for _, spacing := range []time.Duration{10 * time.Microsecond, time.Millisecond, 4900 * time.Microsecond,
		5 * time.Millisecond, 6 * time.Millisecond, 49 * time.Millisecond, 51 * time.Millisecond} {
		waits, sends := pace(interval, every(spacing, time.Second))
		require.LessOrEqual(t, sends, int(time.Second/(interval/10)+time.Second/interval)+1, "spacing %s", spacing)
		require.LessOrEqual(t, maxOf(waits), interval, "spacing %s", spacing)
	}
}

// TestNotifyPacerCarried: a create whose transaction carries its NOTIFY
// (ADR 032) does so only where the pacer would have sent one at once, so
// the bound stays one NOTIFY per quiet moment plus one per interval; its
// NOTIFY covers the commits recorded before it, not those after.
func TestNotifyPacerCarried(t *testing.T) {
	const interval = 50 * time.Millisecond
	start := time.Unix(1_000_000, 0)
	at := func(ms float64) time.Time { return start.Add(time.Duration(ms * float64(time.Millisecond))) }
	p := newNotifyPacer(interval)
	require.True(t, p.carry(at(0)), "the first create carries its NOTIFY")
	require.False(t, p.carry(at(1)), "a second create in the same quiet moment does not")
	p.carried(at(0), at(2))
	require.False(t, p.pending, "the carried NOTIFY needs no other")
	require.False(t, p.carry(at(6)), "quiet counts from the carried commit")

	// A commit recorded before the carrying create: its NOTIFY comes with the create's commit.
	require.True(t, p.commit(at(20)), "a quiet commit: its NOTIFY is due at once")
	require.True(t, p.carry(at(30)))
	p.carried(at(30), at(31))
	require.False(t, p.pending, "the create's NOTIFY, at its commit, covers the commit before it")

	// A commit recorded while the create is under way may commit after it: it keeps its NOTIFY.
	require.True(t, p.carry(at(100)))
	p.commit(at(101))
	p.carried(at(100), at(102))
	require.True(t, p.pending, "a commit recorded after the create asked keeps its NOTIFY")
	require.Equal(t, at(100).Add(interval), p.due, "an interval after the carried NOTIFY, not at once beside it")

	// The bound of TestNotifyPacer holds with carrying creates, and none waits.
	waits, sends := paceCarrying(interval, every(15*time.Millisecond, time.Second), true)
	require.Equal(t, len(waits), sends, "creates 15 ms apart: each carries its NOTIFY")
	require.Equal(t, time.Duration(0), maxOf(waits))
	for _, spacing := range []time.Duration{10 * time.Microsecond, 100 * time.Microsecond, time.Millisecond, 4900 * time.Microsecond,
		5 * time.Millisecond, 6 * time.Millisecond, 49 * time.Millisecond, 51 * time.Millisecond} {
		commits := every(spacing, time.Second)
		waits, sends := paceCarrying(interval, commits, true)
		_, without := pace(interval, commits)
		require.LessOrEqual(t, sends, int(time.Second/(interval/10)+time.Second/interval)+1, "spacing %s", spacing)
		require.LessOrEqual(t, sends, without+1, "spacing %s: no more NOTIFYs than the sender alone would send", spacing)
		require.LessOrEqual(t, maxOf(waits), interval, "spacing %s", spacing)
		require.Len(t, waits, len(commits), "spacing %s: every commit announced", spacing)
	}
}

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// TestNotifyPacerLater: a commit no other instance needs at once (one
// without events: a reactor's checkpoint) waits for the next NOTIFY, an
// interval at most, and does not spend the quiet moment: a create right
// after it is announced at once, with it.
func TestNotifyPacerLater(t *testing.T) {
	const interval = 50 * time.Millisecond
	start := time.Unix(1_000_000, 0)
	at := func(ms float64) time.Time { return start.Add(time.Duration(ms * float64(time.Millisecond))) }
	p := newNotifyPacer(interval)
	require.True(t, p.later(at(0)), "nothing was pending")
	require.Equal(t, at(0).Add(interval), p.due, "announced within an interval, not at once")
	require.False(t, p.later(at(1)), "a second such commit shares that NOTIFY")
	require.Equal(t, at(0).Add(interval), p.due)
	require.True(t, p.commit(at(2)), "a commit with events right after: the moment was quiet, so at once")
	require.Equal(t, at(2), p.due)
	p.sending(at(2))
	require.False(t, p.pending, "that NOTIFY covers the others")

	p = newNotifyPacer(interval)
	p.later(at(0))
	require.True(t, p.carry(at(1)), "a create right after a reactor's checkpoint still carries its NOTIFY")
	p.carried(at(1), at(2))
	require.False(t, p.pending, "and it covers the checkpoint, which committed before it")

	// Such commits alone: one NOTIFY per interval, none waits longer.
	p = newNotifyPacer(interval)
	sends, longest := 0, time.Duration(0)
	var unannounced []time.Time
	for c := time.Duration(0); c < time.Second; c += 100 * time.Microsecond {
		now := start.Add(c)
		for p.pending && !p.due.After(now) {
			for _, u := range unannounced {
				longest = max(longest, p.due.Sub(u))
			}
			unannounced = nil
			p.sending(p.due)
			sends++
		}
		p.later(now)
		unannounced = append(unannounced, now)
	}
	require.LessOrEqual(t, sends, int(time.Second/interval)+1)
	require.LessOrEqual(t, longest, interval)
}
