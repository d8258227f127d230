package store

import (
	"context"
	"fmt"
	"time"
)

// MaxClockOffset is how far this instance's clock may be from the
// database's before it stops being ready: well inside ClockSkew, on which
// the log's readers rely (an event stamped by a clock more than ClockSkew
// behind could be passed over by a reader that starts at a later mark).
const MaxClockOffset = 15 * time.Minute

// ClockOffset is how far the store's clock is ahead of the database's
// (negative: behind), measured around one round trip.
func (db *DB) ClockOffset(ctx context.Context) (time.Duration, error) {
	before := db.now()
	var dbNow time.Time
	if err := db.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbNow); err != nil {
		return 0, mapErr(fmt.Errorf("read the database's clock: %w", err))
	}
	after := db.now()
	mid := before.Add(after.Sub(before) / 2)
	return mid.Sub(dbNow), nil
}

// CheckClock fails when the store's clock is more than MaxClockOffset from
// the database's, saying by how much and what to do.
func (db *DB) CheckClock(ctx context.Context) error {
	off, err := db.ClockOffset(ctx)
	if err != nil {
		return err
	}
	return ClockError(off)
}

// ClockError says what is wrong with a clock off from the database's by
// off; nil within MaxClockOffset.
func ClockError(off time.Duration) error {
	if off.Abs() <= MaxClockOffset {
		return nil
	}
	side := "ahead of"
	if off < 0 {
		side = "behind"
	}
	return fmt.Errorf("this machine's clock is %s %s the database's (at most %s allowed): the log's readers rely on the instances' clocks agreeing; fix the clock (NTP) and start again",
		off.Abs().Round(time.Second), side, MaxClockOffset)
}
