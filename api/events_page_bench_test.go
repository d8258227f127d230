package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
)

// BenchmarkEventsPage splits the CPU of the admin events page (500 events
// from the log's start) into its steps, on a database with a long log,
// BENCH_EVENTS_DATABASE_URL (a `make bench-scale` database, say); it is
// skipped without one. ADR 036 has the figures.
//
//	BENCH_EVENTS_DATABASE_URL=postgres://.../taskservice_scale_1m go test ./api -run '^$' -bench EventsPage -benchmem
func BenchmarkEventsPage(b *testing.B) {
	url := os.Getenv("BENCH_EVENTS_DATABASE_URL")
	if url == "" {
		b.Skip("set BENCH_EVENTS_DATABASE_URL to a database with a long log (make bench-scale builds one)")
	}
	ctx := context.Background()
	pool, err := store.Connect(ctx, url, 4)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	db, err := store.New(pool, store.Config{Projector: projections.Projector{}})
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{DB: db, Logger: zerolog.Nop(), JWTSecret: []byte("bench-events-page-secret")})
	if err != nil {
		b.Fatal(err)
	}
	const limit = 500
	read := func(b *testing.B) []events.Envelope {
		evs, _, err := db.ReadLogPage(ctx, pool, events.Position{}, limit, store.LogFilter{})
		if err != nil {
			b.Fatal(err)
		}
		return evs
	}
	evs := read(b)
	if len(evs) < limit {
		b.Fatalf("the log holds %d events; the bench needs %d", len(evs), limit)
	}
	views, err := s.views(ctx, evs)
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(EventPage{Events: views})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("a page: %d events, %d bytes of JSON", len(evs), len(body))

	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			read(b)
		}
	})
	b.Run("views", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.views(ctx, evs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			if err := json.NewEncoder(io.Discard).Encode(EventPage{Events: views}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("handler", func(b *testing.B) {
		e := s.Echo()
		for b.Loop() {
			rec := httptest.NewRecorder()
			c := e.NewContext(httptest.NewRequest(http.MethodGet, "/api/v1/admin/events?limit=500", nil), rec)
			if err := s.listEvents(c); err != nil || rec.Code != http.StatusOK {
				b.Fatalf("%v %d", err, rec.Code)
			}
		}
	})
}
