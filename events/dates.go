package events

import "time"

// The years a date from a client may fall in (DESIGN §15): JSON and RFC 3339
// carry only four-digit years, and a time.Duration spans only 292 years, so a
// typo such as 0026 for 2026 would otherwise be stored and break every later
// computation with it.
const (
	MinYear = 1970
	MaxYear = 9999
)

// CheckDate refuses a date outside the years MinYear to MaxYear (UTC), as a
// validation error on field.
func CheckDate(field string, t time.Time) error {
	if !DateInRange(t) {
		return Invalid(field, "must be a date in the years %d to %d", MinYear, MaxYear)
	}
	return nil
}

// DateInRange reports whether t falls in the years MinYear to MaxYear (UTC).
func DateInRange(t time.Time) bool {
	y := t.UTC().Year()
	return y >= MinYear && y <= MaxYear
}
