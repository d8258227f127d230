// Package digest is the daily digest: when it is due, what it reports and
// how it reads. The reactor that sends it (reactors/digest.go) and the
// admin preview (GET /api/v1/admin/digest, taskctl digest --preview) both
// build it here, so the preview is the message.
package digest

import (
	"cmp"
	"context"
	"fmt"
	"html"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/clawdbot/task-service/store"
)

// Schedule is when the digest goes out: At, every day, in Loc.
type Schedule struct {
	At  Clock
	Loc *time.Location
}

// Clock is a time of day.
type Clock struct{ Hour, Minute, Second int }

var clockPattern = regexp.MustCompile(`^([01][0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9]))?$`)

// ParseClock reads "HH:MM" or "HH:MM:SS" (24-hour).
func ParseClock(s string) (Clock, error) {
	m := clockPattern.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return Clock{}, fmt.Errorf("%q is not a time of day: use HH:MM (24-hour), e.g. 09:00", s)
	}
	h, _ := strconv.Atoi(m[1])
	min, _ := strconv.Atoi(m[2])
	sec := 0
	if m[3] != "" {
		sec, _ = strconv.Atoi(m[3])
	}
	return Clock{h, min, sec}, nil
}

func (c Clock) String() string {
	if c.Second != 0 {
		return fmt.Sprintf("%02d:%02d:%02d", c.Hour, c.Minute, c.Second)
	}
	return fmt.Sprintf("%02d:%02d", c.Hour, c.Minute)
}

// on is the digest's moment on the calendar day of t in s.Loc. A time that
// a DST change skips moves forward with it (Go's time.Date).
func (s Schedule) on(t time.Time) time.Time {
	y, m, d := t.In(s.Loc).Date()
	return time.Date(y, m, d, s.At.Hour, s.At.Minute, s.At.Second, 0, s.Loc)
}

// Last is the latest digest moment at or before now.
func (s Schedule) Last(now time.Time) time.Time {
	at := s.on(now)
	if at.After(now) {
		at = s.on(at.AddDate(0, 0, -1))
	}
	return at
}

// Next is the first digest moment after now.
func (s Schedule) Next(now time.Time) time.Time {
	at := s.on(now)
	if !at.After(now) {
		at = s.on(at.AddDate(0, 0, 1))
	}
	return at
}

// Period is the day a digest sent at `at` reports: from the digest moment
// of the calendar day before (24 hours, or 23 or 25 across a DST change)
// up to at.
func (s Schedule) Period(at time.Time) (from, to time.Time) {
	return s.on(at.In(s.Loc).AddDate(0, 0, -1)), at
}

// Key numbers a digest by its calendar day in s.Loc (yyyymmdd): the outbox
// keeps one row per key, so a day's digest is sent once whoever sends it.
func (s Schedule) Key(at time.Time) int64 {
	y, m, d := at.In(s.Loc).Date()
	return int64(y)*10000 + int64(m)*100 + int64(d)
}

// Facts are what a digest reports.
type Facts struct {
	From, To time.Time
	Types    []TypeDay // finished in the period, by type name
	Reasons  []Reason  // the most frequent failure reasons in the period
	// Now: the queue and the fleet as the digest is made.
	QueueDepth, InProgress, Scheduled int
	WorkersOnline, IdleSlots          int
	// UsageDay is the latest whole team day before To (YYYY-MM-DD; the
	// day LLM totals and budgets count in); Usage is each type's LLM usage
	// that day, the types that reported some or have a budget.
	UsageDay string
	Usage    []store.TypeDayUsage
}

// TypeDay is one type's tasks finished in the period.
type TypeDay struct {
	Type                                           string
	Completed, Failed, Retried, Skipped, Exhausted int
	// Median run time of its completed tasks (claim to completion); zero
	// when none completed.
	Median time.Duration
}

// Reason is a failure reason and how many failures gave it.
type Reason struct {
	Text  string
	Count int
}

// Limits of the message: Telegram takes 4,096 characters.
const (
	maxTypes     = 15
	maxReasons   = 3
	maxSlowest   = 3
	reasonLength = 80
)

// Gather reads the facts of the period [from, to). The period's tasks are
// found through the index on completed_at: a day's finished tasks, read
// once a day.
func Gather(ctx context.Context, db *store.DB, from, to time.Time) (*Facts, error) {
	f := &Facts{From: from, To: to}
	rows, err := db.Pool().Query(ctx, `SELECT tt.name,
	        count(*) FILTER (WHERE w.status = 'completed'),
	        count(*) FILTER (WHERE w.status = 'failed'),
	        count(*) FILTER (WHERE w.status = 'failed' AND w.retry_outcome = 'retried'),
	        count(*) FILTER (WHERE w.status = 'failed' AND w.retry_outcome = 'skipped'),
	        count(*) FILTER (WHERE w.status = 'failed' AND w.retry_outcome = 'exhausted'),
	        coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM w.completed_at - w.started_at))
	            FILTER (WHERE w.status = 'completed' AND w.started_at IS NOT NULL), 0)
	    FROM worker_tasks w JOIN task_types tt ON tt.id = w.task_type_id
	   WHERE w.completed_at >= $1 AND w.completed_at < $2 AND w.status IN ('completed', 'failed')
	   GROUP BY tt.name ORDER BY tt.name`, from, to)
	if err != nil {
		return nil, fmt.Errorf("digest: count the day's tasks: %w", err)
	}
	f.Types, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (TypeDay, error) {
		var t TypeDay
		var median float64
		err := r.Scan(&t.Type, &t.Completed, &t.Failed, &t.Retried, &t.Skipped, &t.Exhausted, &median)
		t.Median = time.Duration(median * float64(time.Second)).Round(time.Second)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("digest: count the day's tasks: %w", err)
	}
	rows, err = db.Pool().Query(ctx, `SELECT left(coalesce(nullif(btrim(failure_reason), ''), '(no reason given)'), $3), count(*)
	    FROM worker_tasks WHERE completed_at >= $1 AND completed_at < $2 AND status = 'failed'
	   GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT $4`, from, to, reasonLength, maxReasons)
	if err != nil {
		return nil, fmt.Errorf("digest: failure reasons: %w", err)
	}
	f.Reasons, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Reason])
	if err != nil {
		return nil, fmt.Errorf("digest: failure reasons: %w", err)
	}
	stats, err := db.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("digest: queue: %w", err)
	}
	f.QueueDepth, f.InProgress, f.Scheduled, f.WorkersOnline = stats.QueueDepth, stats.ByStatus["in_progress"], stats.Scheduled, stats.WorkersOnline
	capacity, err := db.CapacityTotals(ctx)
	if err != nil {
		return nil, fmt.Errorf("digest: capacity: %w", err)
	}
	f.IdleSlots = capacity.OnlineSlots
	today, err := time.Parse(time.DateOnly, db.Day().Of(to))
	if err != nil {
		return nil, fmt.Errorf("digest: the team's day: %w", err)
	}
	f.UsageDay = today.AddDate(0, 0, -1).Format(time.DateOnly)
	usage, err := db.TypesUsageOn(ctx, f.UsageDay)
	if err != nil {
		return nil, fmt.Errorf("digest: LLM usage: %w", err)
	}
	for _, u := range usage {
		if u.Usage.Reports > 0 || u.DailyTokenBudget != nil || u.DailyCostBudgetUSD != nil {
			f.Usage = append(f.Usage, u)
		}
	}
	return f, nil
}

// Text is the digest as a Telegram message (HTML parse mode), dates in loc.
func Text(f *Facts, loc *time.Location) string {
	var b strings.Builder
	from, to := f.From.In(loc), f.To.In(loc)
	fmt.Fprintf(&b, "📊 <b>Daily digest</b>: %s %s to %s %s (%s)\n",
		from.Format("Mon 2 Jan"), from.Format("15:04"), to.Format("Mon 2 Jan"), to.Format("15:04"), html.EscapeString(loc.String()))
	var total TypeDay
	for _, t := range f.Types {
		total.Completed += t.Completed
		total.Failed += t.Failed
		total.Retried += t.Retried
		total.Skipped += t.Skipped
		total.Exhausted += t.Exhausted
	}
	if len(f.Types) == 0 {
		b.WriteString("\nNo task finished.\n")
	} else {
		fmt.Fprintf(&b, "\n<b>Finished</b>: %s\n", counts(total))
		for i, t := range f.Types {
			if i == maxTypes {
				fmt.Fprintf(&b, "• and %d more types\n", len(f.Types)-maxTypes)
				break
			}
			fmt.Fprintf(&b, "• %s: %s\n", html.EscapeString(t.Type), counts(t))
		}
	}
	if len(f.Reasons) > 0 {
		b.WriteString("\n<b>Top failure reasons</b>\n")
		for _, r := range f.Reasons {
			fmt.Fprintf(&b, "• %d× %s\n", r.Count, html.EscapeString(r.Text))
		}
	}
	if slow := slowest(f.Types); len(slow) > 0 {
		b.WriteString("\n<b>Slowest types</b> (median run time)\n")
		for _, t := range slow {
			fmt.Fprintf(&b, "• %s: %s\n", html.EscapeString(t.Type), t.Median)
		}
	}
	if len(f.Usage) > 0 {
		day, _ := time.Parse(time.DateOnly, f.UsageDay)
		fmt.Fprintf(&b, "\n<b>LLM usage</b> on %s\n", day.Format("Mon 2 Jan"))
		for i, u := range f.Usage {
			if i == maxTypes {
				fmt.Fprintf(&b, "• and %d more types\n", len(f.Usage)-maxTypes)
				break
			}
			fmt.Fprintf(&b, "• %s: %s\n", html.EscapeString(u.Name), usageLine(u))
		}
	}
	fmt.Fprintf(&b, "\n<b>Now</b>: %d queued, %d in progress, %d scheduled; %d %s online, %d idle %s.",
		f.QueueDepth, f.InProgress, f.Scheduled, f.WorkersOnline, plural(f.WorkersOnline, "worker", "workers"),
		f.IdleSlots, plural(f.IdleSlots, "slot", "slots"))
	return b.String()
}

// usageLine is a type's tokens and cost, each against its budget when
// there is one.
func usageLine(u store.TypeDayUsage) string {
	s := fmt.Sprintf("%s tokens", thousands(u.Usage.Tokens))
	if b := u.DailyTokenBudget; b != nil {
		s += fmt.Sprintf(" of %s (%d%%)", thousands(*b), percent(float64(u.Usage.Tokens), float64(*b)))
	}
	s += fmt.Sprintf(", %.2f USD", u.Usage.CostUSD)
	if b := u.DailyCostBudgetUSD; b != nil {
		s += fmt.Sprintf(" of %.2f (%d%%)", *b, percent(u.Usage.CostUSD, *b))
	}
	if u.Paused && u.PausedBy == "budget" {
		s += "; paused by its budget"
	}
	return s
}

func percent(used, budget float64) int {
	if budget <= 0 {
		return 100
	}
	return int(used / budget * 100)
}

// thousands writes n with comma separators: 1,234,567.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10) // never negative: reports are checked
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func counts(t TypeDay) string {
	s := fmt.Sprintf("%d completed, %d failed", t.Completed, t.Failed)
	if t.Failed > 0 {
		s += fmt.Sprintf(" (%d retried, %d skipped, %d out of retries)", t.Retried, t.Skipped, t.Exhausted)
	}
	return s
}

// slowest is the types with the longest median run time, longest first.
func slowest(types []TypeDay) []TypeDay {
	var out []TypeDay
	for _, t := range types {
		if t.Median > 0 {
			out = append(out, t)
		}
	}
	// Stable: ties keep name order.
	slices.SortStableFunc(out, func(a, b TypeDay) int { return cmp.Compare(b.Median, a.Median) })
	return out[:min(len(out), maxSlowest)]
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

var tag = regexp.MustCompile(`</?b>`)

// Plain is a digest's text for a terminal: no markup.
func Plain(text string) string { return html.UnescapeString(tag.ReplaceAllString(text, "")) }
