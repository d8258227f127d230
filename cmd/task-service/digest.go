package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/clawdbot/task-service/store/digest"
)

// digestConfig is when the daily digest goes to the Telegram chat; its
// time zone is the team's (DIGEST_TZ, usageConfig).
type digestConfig struct {
	at string
}

func (c *digestConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.at, "digest-at", "09:00",
		"local time (HH:MM, 24-hour, in DIGEST_TZ) of the daily digest sent to the Telegram chat, or off (env DIGEST_AT)")
}

// off says the digest is not sent (the preview still works, at 09:00).
func (c digestConfig) off() bool { return strings.EqualFold(strings.TrimSpace(c.at), "off") }

// schedule parses DIGEST_AT; an error says how to write it.
func (c digestConfig) schedule(loc *time.Location) (digest.Schedule, error) {
	at := c.at
	if c.off() {
		at = "09:00"
	}
	clock, err := digest.ParseClock(at)
	if err != nil {
		return digest.Schedule{}, fmt.Errorf("DIGEST_AT: %v, or off", err)
	}
	return digest.Schedule{At: clock, Loc: loc}, nil
}
