package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api/client"
	"github.com/clawdbot/task-service/migrations"
	"github.com/clawdbot/task-service/store/storetest"
)

// A rollback: the database was migrated by a newer release (here, one
// migration past this binary's last), and this binary starts on it as
// docs/deploy.md promises, says so in its log, and serves. `migrate up`
// says there is nothing to apply and why. The start failed before with
// "no migration found for version N".
func TestBinaryRunsOnANewerSchema(t *testing.T) {
	ctx := context.Background()
	dbURL := storetest.NewDB(t)
	latest, err := migrations.Latest()
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `UPDATE schema_migrations SET version = $1`, latest+1)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	s := startServer(t, dbURL)
	require.Contains(t, s.logs.String(), fmt.Sprintf(`"schema":%d,"binary_schema":%d`, latest+1, latest))
	require.Contains(t, s.logs.String(), "running on it without migrating (a rollback)")
	admin := s.rootAdmin(t)
	_, err = admin.CreateTaskType(ctx, client.NewTaskType{Name: "crawl", ParamSchema: json.RawMessage(`{"type":"object"}`)})
	require.NoError(t, err)

	cmd := exec.Command(binary, "migrate", "up")
	cmd.Env = baseEnv("DATABASE_URL=" + dbURL)
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), fmt.Sprintf("the database schema is at migration %d, newer than this binary's last (%d)", latest+1, latest))
}
