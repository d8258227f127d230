package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// runState survives restarts: how many times this worker account was
// started from this work dir (the heartbeat's restart_count) and whether
// the last run exited cleanly.
type runState struct {
	Runs      int       `json:"runs"`
	CleanExit bool      `json:"clean_exit"`
	LastStart time.Time `json:"last_start"`
	path      string
}

// loadRunState reads the state file, counts this start and saves it. A
// missing or unreadable file starts the count again; the count is for
// humans, so that is logged, not fatal.
func loadRunState(workDir, email string, log zerolog.Logger) runState {
	safe := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@._-", r) {
			return r
		}
		return '_'
	}, email)
	s := runState{path: filepath.Join(workDir, "state-"+safe+".json")}
	if b, err := os.ReadFile(s.path); err == nil {
		if err := json.Unmarshal(b, &s); err != nil {
			log.Warn().Err(err).Str("file", s.path).Msg("state file unreadable; restart count starts again")
		} else if !s.CleanExit {
			log.Warn().Time("last_start", s.LastStart).Msg("the previous run did not exit cleanly")
		}
	}
	s.Runs++
	s.CleanExit = false
	s.LastStart = time.Now().UTC()
	s.save(log)
	return s
}

func (s runState) save(log zerolog.Logger) {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		log.Warn().Err(err).Msg("cannot create the work dir for the state file")
		return
	}
	b, _ := json.Marshal(s)
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		log.Warn().Err(err).Msg("cannot write the state file")
		return
	}
	if err := os.Rename(tmp, s.path); err != nil {
		log.Warn().Err(err).Msg("cannot write the state file")
	}
}
