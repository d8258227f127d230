package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
)

// updateLimits shape how stdout lines become task updates.
type updateLimits struct {
	FlushEvery time.Duration // a line waits at most this long before it is posted
	FlushLines int           // ...or until this many lines are waiting
	MaxMessage int           // bytes per update; lines are joined up to this
	MinGap     time.Duration // rate limit: at least this between two posts
	MaxBacklog int           // bytes waiting before lines are omitted
	TailLines  int           // lines kept after an omission, so the end of a flood is seen
}

func defaultUpdateLimits() updateLimits {
	return updateLimits{
		FlushEvery: 2 * time.Second,
		FlushLines: 50,
		MaxMessage: 8 << 10,
		MinGap:     250 * time.Millisecond,
		MaxBacklog: 256 << 10,
		TailLines:  50,
	}
}

// updater batches a command's stdout lines into task updates: one post per
// FlushEvery or FlushLines, lines merged up to MaxMessage bytes, at most one
// post per MinGap. Add never blocks, so a command printing fast is never
// slowed by the API. Nothing is dropped unless the backlog passes
// MaxBacklog (the API is down or the command floods faster than the rate
// limit); then the lines in the middle are replaced by one
// "... N lines omitted ..." line and the last TailLines are kept.
type updater struct {
	post   func(ctx context.Context, msg string) error
	log    zerolog.Logger
	limits updateLimits

	mu        sync.Mutex
	pending   []string // each at most MaxMessage bytes
	bytes     int
	oldest    time.Time // arrival of pending[0]
	overflow  []string  // the tail kept while the backlog is full
	overBytes int       // bytes in overflow
	omitted   int       // lines dropped from the overflow since the last note
	closed    bool
	dead      bool // the task is no longer ours: stop posting

	wake chan struct{}
	done chan struct{}

	// Counters for the task's log line.
	lines, posts, omittedTotal, unposted int
}

func newUpdater(limits updateLimits, log zerolog.Logger, post func(ctx context.Context, msg string) error) *updater {
	return &updater{post: post, log: log, limits: limits, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// Start runs the posting loop until Close is called and everything is
// posted, or ctx ends.
func (u *updater) Start(ctx context.Context) {
	go func() {
		defer close(u.done)
		u.loop(ctx)
	}()
}

// Add queues one line of output.
func (u *updater) Add(line string) {
	line = sanitizeLine(line)
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, chunk := range splitMax(line, u.limits.MaxMessage) {
		u.lines++
		if u.dead || u.closed {
			continue
		}
		if len(u.overflow) > 0 || u.bytes+len(chunk)+1 > u.limits.MaxBacklog {
			u.overflow = append(u.overflow, chunk)
			u.overBytes += len(chunk) + 1
			// Keep at most TailLines lines and a quarter of the backlog,
			// so the tail always fits back in.
			for len(u.overflow) > 1 && (len(u.overflow) > u.limits.TailLines || u.overBytes > u.limits.MaxBacklog/4) {
				u.overBytes -= len(u.overflow[0]) + 1
				u.overflow = u.overflow[1:]
				u.omitted++
				u.omittedTotal++
			}
			continue
		}
		if len(u.pending) == 0 {
			u.oldest = time.Now()
		}
		u.pending = append(u.pending, chunk)
		u.bytes += len(chunk) + 1
	}
	if len(u.pending) >= u.limits.FlushLines || u.bytes >= u.limits.MaxMessage {
		u.signal()
	}
}

func (u *updater) signal() {
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// Close posts what is left and waits for the loop to finish (or ctx, the
// loop's own context, to end).
func (u *updater) Close() {
	u.mu.Lock()
	u.closed = true
	u.mu.Unlock()
	u.signal()
	<-u.done
}

func (u *updater) loop(ctx context.Context) {
	var lastPost time.Time
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		for {
			u.mu.Lock()
			due, wait, finished := u.dueLocked(time.Now())
			u.mu.Unlock()
			if due {
				break
			}
			if finished {
				return
			}
			timer.Reset(wait)
			select {
			case <-u.wake:
			case <-timer.C:
			case <-ctx.Done():
				u.giveUp()
				return
			}
		}
		if !sleepCtx(ctx, u.limits.MinGap-time.Since(lastPost)) {
			u.giveUp()
			return
		}
		u.mu.Lock()
		msg := u.takeLocked()
		u.mu.Unlock()
		if strings.TrimSpace(msg) == "" {
			continue // the service refuses blank updates; blank lines alone carry nothing
		}
		err := u.post(ctx, msg)
		lastPost = time.Now()
		switch {
		case err == nil:
			u.mu.Lock()
			u.posts++
			u.mu.Unlock()
		case ctx.Err() != nil:
			u.giveUp()
			return
		case gone(err):
			u.log.Warn().Err(err).Msg("the task is no longer ours: output is no longer posted")
			u.mu.Lock()
			u.dead = true
			u.pending, u.overflow, u.bytes, u.overBytes = nil, nil, 0, 0
			u.mu.Unlock()
		default:
			// Rejected (400, 413): retrying the same text cannot help.
			u.log.Warn().Err(err).Int("bytes", len(msg)).Msg("the service rejected an update; skipped it")
		}
	}
}

// dueLocked says whether a post is due now; if not, how long until one is,
// and whether the loop is finished (closed and nothing left).
func (u *updater) dueLocked(now time.Time) (due bool, wait time.Duration, finished bool) {
	u.refillLocked()
	if len(u.pending) == 0 {
		return false, time.Hour, u.closed || u.dead
	}
	age := now.Sub(u.oldest)
	if u.closed || len(u.pending) >= u.limits.FlushLines || u.bytes >= u.limits.MaxMessage || age >= u.limits.FlushEvery {
		return true, 0, false
	}
	return false, u.limits.FlushEvery - age, false
}

// takeLocked removes the next message: as many whole lines as fit.
func (u *updater) takeLocked() string {
	u.refillLocked()
	var b strings.Builder
	n := 0
	for n < len(u.pending) {
		l := u.pending[n]
		if n > 0 && b.Len()+1+len(l) > u.limits.MaxMessage {
			break
		}
		if n > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l)
		u.bytes -= len(l) + 1
		n++
	}
	u.pending = u.pending[n:]
	if len(u.pending) > 0 {
		// What is left was already due with this batch.
		u.oldest = time.Now().Add(-u.limits.FlushEvery)
	}
	return b.String()
}

// refillLocked moves the kept tail back into the queue, behind a note of
// how many lines were omitted, once the backlog has room for it.
func (u *updater) refillLocked() {
	if len(u.overflow) == 0 {
		return
	}
	size := u.overBytes
	if u.bytes+size+100 > u.limits.MaxBacklog && !u.closed {
		return
	}
	if len(u.pending) == 0 {
		u.oldest = time.Now().Add(-u.limits.FlushEvery)
	}
	if u.omitted > 0 {
		note := fmt.Sprintf("... %d lines omitted (output came faster than updates may be posted) ...", u.omitted)
		u.pending = append(u.pending, note)
		u.bytes += len(note) + 1
		u.omitted = 0
	}
	u.pending = append(u.pending, u.overflow...)
	u.bytes += size
	u.overflow, u.overBytes = nil, 0
}

func (u *updater) giveUp() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.unposted = len(u.pending) + len(u.overflow) + u.omitted
	if u.unposted > 0 {
		u.log.Warn().Int("lines", u.unposted).Msg("stopped before posting all output as updates")
	}
}

// stats is read after Close.
func (u *updater) stats() (lines, posts, omitted int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.lines, u.posts, u.omittedTotal
}

// sanitizeLine makes a line storable: valid UTF-8, no NUL (PostgreSQL text
// cannot hold it), no CR of a CRLF ending.
func sanitizeLine(s string) string {
	s = strings.TrimSuffix(s, "\r")
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "")
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}

// splitMax cuts s into pieces of at most n bytes at rune boundaries.
func splitMax(s string, n int) []string {
	if len(s) <= n {
		return []string{s}
	}
	var out []string
	for len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			cut = n
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return append(out, s)
}
