package store

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/clawdbot/task-service/events"
)

// ClockSkew bounds how far an event's occurred_at may lie from the order
// of the log: an event's time is taken (in Go, from its instance's clock)
// at most this long before its transaction writes, and the instances'
// clocks agree within it. The archive (archive.Skew) and the log's time
// bounds (log_marks, the newest-first reads) rest on it.
const ClockSkew = time.Hour

// markEvery is how often the service adds a mark at the log's end.
const markEvery = 15 * time.Minute

// logMark is a row of log_marks: every event at or after pos in consumer
// order occurred at or after at.
type logMark struct {
	pos events.Position
	at  time.Time
}

// logMarks is an instance's copy of log_marks, sorted by position, loaded
// and extended in the background so that no read waits for it.
type logMarks struct {
	mu    sync.Mutex
	marks []logMark
	// parts are task_events' partitions (their bounds), loaded with the
	// marks: a read's first window reaches to the end of its partition.
	parts    []EventPartition
	loadedAt time.Time // the store's clock at the last load
	loading  bool
}

// logFloor is the earliest time an event after pos can have occurred at,
// from the greatest mark at or before pos; ok is false when no mark is
// (a position before every mark, or marks not loaded yet): the read then
// names no time and reads every period.
func (db *DB) logFloor(pos events.Position) (time.Time, bool) {
	m := &db.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	db.refreshMarksLocked()
	i := sort.Search(len(m.marks), func(i int) bool { return pos.Less(m.marks[i].pos) })
	if i == 0 {
		return time.Time{}, false
	}
	// Marks are exact or made forward, so their times grow with their
	// positions; the greatest one below pos is the tightest bound.
	return m.marks[i-1].at, true
}

// firstMark is the time of the first mark of the log.
func (db *DB) firstMark() (time.Time, bool) {
	m := &db.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	db.refreshMarksLocked()
	if len(m.marks) == 0 {
		return time.Time{}, false
	}
	return m.marks[0].at, true
}

// refreshMarksLocked starts a load of the marks (and a new mark when the
// newest is older than markEvery) when the copy is older than a minute.
func (db *DB) refreshMarksLocked() {
	m := &db.marks
	now := db.Now()
	if m.loading || (!m.loadedAt.IsZero() && now.Sub(m.loadedAt) < time.Minute && now.After(m.loadedAt)) {
		return
	}
	m.loading = true
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := db.LoadLogMarks(ctx)
		m.mu.Lock()
		m.loading = false
		if err != nil {
			m.loadedAt = time.Time{}
		}
		m.mu.Unlock()
	}()
}

// addMarkSQL adds a mark at the log's end unless the newest one (the last
// by position: one probe of the key, however many marks a year leaves) is
// more recent than $2.
const addMarkSQL = `INSERT INTO log_marks (tx_id, seq, occurred_at)
		SELECT pg_snapshot_xmax(pg_current_snapshot()), 0, least($1, statement_timestamp() - $3::interval)
		 WHERE coalesce((SELECT occurred_at FROM log_marks ORDER BY tx_id DESC, seq DESC LIMIT 1), '-infinity') <= $2
		ON CONFLICT (tx_id, seq) DO NOTHING`

// marksAfterSQL reads the marks after a position, in order.
const marksAfterSQL = `SELECT tx_id::text::bigint, seq, occurred_at FROM log_marks
		 WHERE (tx_id, seq) > ($1::text::xid8, $2) ORDER BY tx_id, seq`

// LoadLogMarks adds a mark at the log's end when the newest one is older
// than markEvery (by the store's clock), then reads the marks after those
// already held. The service does it in the background as reads need it;
// tests call it to have the bounds at once.
func (db *DB) LoadLogMarks(ctx context.Context) error {
	m := &db.marks
	now := db.Now()
	m.mu.Lock()
	var after logMark
	if n := len(m.marks); n > 0 {
		after = m.marks[n-1]
	}
	m.mu.Unlock()
	// Every transaction from the snapshot's xmax on gets its id after now,
	// so its events were stamped after now less ClockSkew. Now is the
	// earlier of this instance's clock and the database's: an instance
	// whose clock runs ahead must not mark the others' events as later
	// than they are. No read of the log: one tiny insert, skipped while a
	// recent mark exists.
	if _, err := db.pool.Exec(ctx, addMarkSQL, now.Add(-ClockSkew), now.Add(-ClockSkew-markEvery), ClockSkew.String()); err != nil {
		return mapErr(fmt.Errorf("log mark: %w", err))
	}
	rows, err := db.pool.Query(ctx, marksAfterSQL, fmt.Sprint(after.pos.TxID), after.pos.Seq)
	if err != nil {
		return mapErr(fmt.Errorf("log marks: %w", err))
	}
	defer rows.Close()
	var got []logMark
	for rows.Next() {
		var tx int64
		var mk logMark
		if err := rows.Scan(&tx, &mk.pos.Seq, &mk.at); err != nil {
			return mapErr(err)
		}
		mk.pos.TxID = uint64(tx)
		got = append(got, mk)
	}
	if err := rows.Err(); err != nil {
		return mapErr(err)
	}
	parts, err := EventPartitions(ctx, db.pool)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mk := range got {
		// A mark's time never goes back along the log: a later mark with
		// an earlier time (a clock set back) bounds no better than the one
		// before it.
		if n := len(m.marks); n > 0 {
			last := m.marks[n-1]
			if !last.pos.Less(mk.pos) {
				continue
			}
			if mk.at.Before(last.at) {
				mk.at = last.at
			}
		}
		m.marks = append(m.marks, mk)
	}
	m.loadedAt = now
	m.parts = parts
	return nil
}

// partitionEnd is the end of the partition holding t, as last loaded.
func (db *DB) partitionEnd(t time.Time) (time.Time, bool) {
	m := &db.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.parts {
		if !p.Default && !t.Before(p.From) && t.Before(p.To) {
			return p.To, true
		}
	}
	return time.Time{}, false
}
