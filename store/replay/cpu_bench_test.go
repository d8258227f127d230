package replay_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/clawdbot/task-service/store/replay"
)

// BenchmarkVerify runs Verify against REPLAY_BENCH_URL (a seeded database).
func BenchmarkVerify(b *testing.B) {
	url := os.Getenv("REPLAY_BENCH_URL")
	if url == "" {
		b.Skip("set REPLAY_BENCH_URL")
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	for b.Loop() {
		if _, err := replay.Verify(context.Background(), pool, replay.VerifyConfig{}); err != nil {
			b.Fatal(err)
		}
	}
}
