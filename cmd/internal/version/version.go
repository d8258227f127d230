// Package version tells which build of a binary is running: the module
// version and the VCS revision that runtime/debug.ReadBuildInfo carries
// (go build stamps both; nothing to pass with -ldflags).
package version

import (
	"fmt"
	"runtime/debug"
)

// Info is what the build recorded. Empty fields were not recorded (a build
// outside a git checkout has no revision).
type Info struct {
	Module    string // github.com/clawdbot/task-service
	Version   string // v1.2.3 for a tagged module, (devel) for a build from a checkout
	Revision  string // the git commit
	Time      string // the commit's time (RFC 3339)
	Modified  bool   // the work tree had uncommitted changes
	GoVersion string
}

// Read reads the running binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown"}
	}
	in := Info{Module: bi.Main.Path, Version: bi.Main.Version, GoVersion: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	return in
}

// Short is the version for logs and metrics: v1.2.3, or the module version
// with the revision's first 12 characters and "-dirty" for modified trees.
func (in Info) Short() string {
	out := in.Version
	if in.Revision != "" {
		rev := in.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if in.Modified {
			rev += "-dirty"
		}
		out += " " + rev
	}
	return out
}

// String is the line `NAME version` prints.
func (in Info) String() string {
	rev := in.Revision
	if rev == "" {
		rev = "unknown (not built from a git checkout)"
	} else if in.Modified {
		rev += " (with uncommitted changes)"
	}
	s := fmt.Sprintf("version %s\nrevision %s\n", in.Version, rev)
	if in.Time != "" {
		s += "committed " + in.Time + "\n"
	}
	return s + fmt.Sprintf("module %s\nbuilt with %s\n", in.Module, in.GoVersion)
}
