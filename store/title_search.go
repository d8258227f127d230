package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
)

// A title search walks the trigram index (task_titles_title_trgm), whose
// cost is the posting lists of every trigram of the term. A word most
// titles share ("task" in "task 12345") has a posting list as long as the
// history, so a rare term paid for the common word beside it. The search
// asks the index for the term's rare words only and checks the whole term
// on the few titles they find; which words are rare comes from the
// planner's own sample of titles (the histogram ANALYZE keeps), read at
// most once per titleSampleAge.

// titleSampleAge is how long a read sample of titles serves searches:
// ANALYZE renews it only as the table grows.
const titleSampleAge = 5 * time.Minute

// titleSample is the histogram of task_titles.title, lower-cased.
type titleSample struct {
	read   time.Time
	titles []string
}

// titleSampleSQL reads the histogram ANALYZE keeps of the titles (about
// default_statistics_target of them, spread over the table); no row before
// the first ANALYZE.
const titleSampleSQL = `SELECT histogram_bounds::text::text[] FROM pg_stats
	WHERE schemaname = current_schema() AND tablename = 'task_titles' AND attname = 'title' AND histogram_bounds IS NOT NULL`

// loadTitleSample reads the sample when the one held is older than
// titleSampleAge. A failed read keeps the old one: a search without it
// only costs more.
func (db *DB) loadTitleSample(ctx context.Context) {
	if s := db.titles.Load(); s != nil && db.Now().Sub(s.read) < titleSampleAge {
		return
	}
	var titles []string
	err := db.pool.QueryRow(ctx, titleSampleSQL).Scan(&titles)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return
	}
	for i := range titles {
		titles[i] = strings.ToLower(titles[i])
	}
	db.titles.Store(&titleSample{read: db.Now(), titles: titles})
}

// rareWords are the words of term (runs of letters and digits) long enough
// for a trigram and found in at most one sampled title (about one title
// in a hundred or fewer). None when term is one word: the index then reads
// that word anyway.
func (s *titleSample) rareWords(term string) []string {
	if s == nil || len(s.titles) == 0 {
		return nil
	}
	words := strings.FieldsFunc(term, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if len(words) == 1 && words[0] == term {
		return nil
	}
	var rare []string
	for _, w := range words {
		if len([]rune(w)) < 3 || slices.Contains(rare, w) {
			continue
		}
		lw, seen := strings.ToLower(w), 0
		for _, t := range s.titles {
			if strings.Contains(t, lw) {
				seen++
			}
		}
		if seen <= 1 {
			rare = append(rare, w)
		}
	}
	return rare
}

// titleMatch is the condition on task_titles that keeps the titles
// containing term. With rare words, the index reads those; the whole term
// is checked on an expression the index does not have, so the planner
// cannot give it to the index.
func (db *DB) titleMatch(term string, arg func(any) string) string {
	full := "%" + escapeLike(term) + "%"
	rare := db.titles.Load().rareWords(term)
	if len(rare) == 0 {
		return "title ILIKE " + arg(full)
	}
	conds := make([]string, 0, len(rare)+1)
	for _, w := range rare {
		conds = append(conds, "title ILIKE "+arg("%"+escapeLike(w)+"%"))
	}
	conds = append(conds, "(title || '') ILIKE "+arg(full))
	return strings.Join(conds, " AND ")
}
