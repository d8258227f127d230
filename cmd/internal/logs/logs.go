// Package logs builds the zerolog logger the binaries share: level and
// format from their flags, JSON lines unless a person is watching.
package logs

import (
	"os"
	"time"

	"github.com/rs/zerolog"
)

// New logs to stderr at level (info when empty or unknown). format is
// "json", "console", or "auto": console when stderr is a terminal.
func New(level, format string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		lvl = zerolog.InfoLevel
	}
	var log zerolog.Logger
	if format == "console" || (format == "auto" && isTerminal(os.Stderr)) {
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly})
	} else {
		log = zerolog.New(os.Stderr)
	}
	return log.Level(lvl).With().Timestamp().Logger()
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
