package version

import (
	"strings"
	"testing"
)

func TestShortAndString(t *testing.T) {
	in := Info{Module: "github.com/clawdbot/task-service", Version: "(devel)", Revision: "0123456789abcdef0123", Modified: true, Time: "2026-11-24T02:00:00Z", GoVersion: "go1.26"}
	if got := in.Short(); got != "(devel) 0123456789ab-dirty" {
		t.Fatalf("Short = %q", got)
	}
	s := in.String()
	for _, want := range []string{"version (devel)\n", "revision 0123456789abcdef0123 (with uncommitted changes)\n", "committed 2026-11-24T02:00:00Z\n", "built with go1.26\n"} {
		if !strings.Contains(s, want) {
			t.Fatalf("String lacks %q:\n%s", want, s)
		}
	}
	if got := (Info{Version: "v1.2.0"}).Short(); got != "v1.2.0" {
		t.Fatalf("Short of a tagged build = %q", got)
	}
	// A test binary has build info but no VCS stamp; Read must not fail.
	if Read().Version == "" {
		t.Fatal("Read gave no version")
	}
}
