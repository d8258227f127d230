package api_test

import (
	"context"
	"flag"
	"os"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/api"
)

var update = flag.Bool("update-genclient", false, "rewrite api/genclient/genclient.gen.go from the current document")

const genFile = "genclient/genclient.gen.go"

// lifecycleOps are the operations generated: a worker's and an admin's
// whole lifecycle. Routes added elsewhere leave this package alone.
var lifecycleOps = []string{
	"login", "createWorker", "createTaskType", "createTask", "heartbeat", "claimTask", "postUpdate",
	"postResult", "setTaskStatus", "getTask", "listTasks", "getTaskChain", "retryTask", "getStats", "listTaskEvents",
}

// generate runs oapi-codegen on the document the server serves.
func generate(t *testing.T) string {
	t.Helper()
	raw, err := api.Document()
	require.NoError(t, err)
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()))
	cfg := codegen.Configuration{
		PackageName:   "genclient",
		Generate:      codegen.GenerateOptions{Client: true, Models: true},
		OutputOptions: codegen.OutputOptions{IncludeOperationIDs: lifecycleOps},
	}.UpdateDefaults()
	require.NoError(t, cfg.Validate())
	code, err := codegen.Generate(doc, cfg)
	require.NoError(t, err, "oapi-codegen must accept the document")
	return code
}

// TestGeneratedClientIsCurrent generates the client from today's document
// and compares it with the committed one, which the lifecycle test drives.
func TestGeneratedClientIsCurrent(t *testing.T) {
	code := generate(t)
	if *update {
		require.NoError(t, os.WriteFile(genFile, []byte(code), 0o644))
		return
	}
	committed, err := os.ReadFile(genFile)
	require.NoError(t, err)
	require.True(t, string(committed) == code,
		"api/genclient/genclient.gen.go is not what oapi-codegen makes of today's document; run: go test ./api -run TestGeneratedClientIsCurrent -update-genclient")
}
