package events

import "time"

// Timestamps clients send are bounded to years 1970–9999 (DESIGN §15): they
// round-trip through PostgreSQL and RFC 3339 alike.
var (
	minTimestamp = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTimestamp = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// ParseTimestamp reads an RFC 3339 timestamp sent in field.
func ParseTimestamp(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, Invalid(field, "must be an RFC 3339 timestamp like 2030-01-02T15:04:05Z, not %q", cut(s, 64))
	}
	return t.UTC(), checkTime(field, t)
}

func checkTime(field string, t time.Time) error {
	if t.Before(minTimestamp) || !t.Before(maxTimestamp) {
		return Invalid(field, "must be in the years 1970 to 9999")
	}
	return nil
}
