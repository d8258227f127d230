package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/store"
)

// The added cost per task of recording task data: one task.data_uploaded
// (lock the task row, read the name's row, decide, append the event and
// the projection, commit) next to one thread message through the ordinary
// command path, in the same run. The object's own completion is a no-op
// here: what is measured is what the index adds to an upload.
func BenchmarkDataEvent(b *testing.B) {
	s := newBenchStore(b, 1)
	ctx := context.Background()
	meta := events.Meta{Actor: events.Actor{Kind: events.ActorWorker, ID: s.workers[0]}}
	t, err := s.db.CreateTask(ctx, s.db.Pool(), s.newTask(0), events.Meta{Actor: events.System("bench")})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := s.db.UpdateTask(ctx, s.db.Pool(), t.ID, meta, func(t *events.Task) ([]events.Payload, error) {
		return t.Claim(s.workers[0])
	}); err != nil {
		b.Fatal(err)
	}
	sha := strings.Repeat("ab", 32)
	b.Run("task.data_uploaded", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			name := fmt.Sprintf("part-%d.jsonl", i)
			_, err := s.db.RecordDataUpload(ctx, store.DataUpload{TaskID: t.ID, WorkerID: s.workers[0], DataType: "posts",
				Filename: name, Key: events.DataKey(t.ID, "posts", name), Size: 1000, SHA256: sha,
				ContentType: "application/x-ndjson", NewID: uuid.Must(uuid.NewV7()).String(), MaxTaskBytes: 1 << 50},
				meta, func(context.Context) error { return nil })
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("task.update_posted (reference)", func(b *testing.B) {
		for b.Loop() {
			id := uuid.Must(uuid.NewV7()).String()
			if _, _, err := s.db.UpdateTask(ctx, s.db.Pool(), t.ID, meta, func(t *events.Task) ([]events.Payload, error) {
				return t.PostUpdate(id, s.workers[0], "collected 300 posts", true)
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
