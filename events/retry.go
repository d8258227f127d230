package events

import (
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// The retry system's texts and rules (seed design §8). A retry is a new task:
// the failed task's title with " (retry N)", its description with one
// "PREVIOUS ATTEMPT FAILED" section that replaces the previous attempt's.

// PreviousAttemptMarker starts the section a retry adds to its description.
const PreviousAttemptMarker = "PREVIOUS ATTEMPT FAILED: "

// MaxRetryBackoff caps the delay before a retry becomes claimable.
const MaxRetryBackoff = time.Hour

var retrySuffix = regexp.MustCompile(`\s*\(retry \d+\)$`)

// RetryTitle is the title of retry n of a task titled title: the previous
// " (retry K)" suffix, if any, becomes " (retry n)".
func RetryTitle(title string, n int) string {
	suffix := fmt.Sprintf(" (retry %d)", n)
	base := retrySuffix.ReplaceAllString(title, "")
	if room := MaxTitleLen - utf8.RuneCountInString(suffix); utf8.RuneCountInString(base) > room {
		base = string([]rune(base)[:room-1]) + "…"
	}
	return base + suffix
}

// OriginalDescription strips the section a previous retry added.
func OriginalDescription(desc string) string {
	if strings.HasPrefix(desc, PreviousAttemptMarker) {
		return ""
	}
	if i := strings.Index(desc, "\n\n"+PreviousAttemptMarker); i >= 0 {
		return desc[:i]
	}
	return desc
}

// RetryText says what retry n needs to know about the attempt before it.
type RetryText struct {
	Reason     string // the failure reason
	N          int    // this retry's number (its retry_count)
	MaxRetries int    // the type's max_retries
	Hint       string // advice for this attempt, "" when none
	Manual     bool   // an admin asked for it
}

// RetryDescription is the description of a retry of a task described desc:
// the original text, then the failure, which retry this is, and the hint.
func RetryDescription(desc string, r RetryText) string {
	var sb strings.Builder
	sb.WriteString(PreviousAttemptMarker)
	reason := strings.TrimSpace(r.Reason)
	if reason == "" {
		reason = "no reason given"
	}
	sb.WriteString(reason)
	switch {
	case r.N <= r.MaxRetries:
		fmt.Fprintf(&sb, "\nThis is retry %d of %d.", r.N, r.MaxRetries)
	default:
		fmt.Fprintf(&sb, "\nThis is retry %d, ordered by hand after the type's %d automatic retries.", r.N, r.MaxRetries)
	}
	if r.Manual && r.N <= r.MaxRetries {
		sb.WriteString(" An admin ordered it by hand.")
	}
	if hint := strings.TrimSpace(r.Hint); hint != "" {
		sb.WriteString("\n")
		sb.WriteString(hint)
	}
	section := sb.String()
	base := strings.TrimRight(OriginalDescription(desc), " \t\r\n")
	if base == "" {
		return truncateBytes(section, MaxDescriptionLen)
	}
	if room := MaxDescriptionLen - len(section) - len("\n\n"); len(base) > room {
		base = truncateBytes(base, max(0, room-len("…"))) + "…"
	}
	return base + "\n\n" + section
}

// RetryBackoff is the delay before retry n becomes claimable when its type's
// base backoff is baseSeconds: base × 2^(n-1), at most an hour; 0 when the
// type has none.
func RetryBackoff(baseSeconds, n int) time.Duration {
	if baseSeconds <= 0 || n < 1 {
		return 0
	}
	d := time.Duration(baseSeconds) * time.Second
	for i := 1; i < n && d < MaxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, MaxRetryBackoff)
}

// truncateBytes cuts s to at most n bytes on a rune boundary.
func truncateBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
