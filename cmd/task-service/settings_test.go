package main

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/cmd/internal/settings"
)

func load(t *testing.T, env map[string]string, args ...string) (config, error) {
	t.Helper()
	var cfg config
	fs := flagSet("task-service serve", &cfg)
	fs.SetOutput(&strings.Builder{})
	err := loadSettings(fs, &cfg, args, func(name string) (string, bool) { v, ok := env[name]; return v, ok })
	return cfg, err
}

// The environment sets every flag through the flag's own parser; the
// command line wins over it.
func TestEnvironmentSetsTheFlags(t *testing.T) {
	cfg, err := load(t, map[string]string{"REACTORS": "False", "STUCK_DETECTOR": "off", "SCHEDULER": "no",
		"TOKEN_TTL": "90m", "BCRYPT_COST": "12", "LOG_LEVEL": "warn", "DATA_MAX_BYTES": "1024", "TELEGRAM_UPDATES": "poll"})
	require.NoError(t, err)
	require.False(t, cfg.bg.reactors, "REACTORS=False turns the reactors off")
	require.False(t, cfg.bg.stuckDetector)
	require.False(t, cfg.bg.scheduler)
	require.True(t, cfg.bg.freshness, "unset keeps the default")
	require.Equal(t, 90*time.Minute, cfg.tokenTTL)
	require.Equal(t, 12, cfg.bcryptCost)
	require.Equal(t, "warn", cfg.logLevel)
	require.EqualValues(t, 1024, cfg.data.maxFileBytes)
	require.Equal(t, "poll", cfg.bg.telegram.updates)

	cfg, err = load(t, map[string]string{"TOKEN_TTL": "90m", "REACTORS": ""}, "--token-ttl", "2h")
	require.NoError(t, err)
	require.Equal(t, 2*time.Hour, cfg.tokenTTL, "the command line wins")
	require.True(t, cfg.bg.reactors, "an empty variable is unset")

	_, err = load(t, map[string]string{"TASK_SERVICE_TEST_MIN_FRESHNESS_AGE": "soon"})
	require.ErrorContains(t, err, `TASK_SERVICE_TEST_MIN_FRESHNESS_AGE="soon": want a duration`)
}

// The README's settings table lists every flag's environment twin, and
// nothing that is not a setting.
func TestSettingsTableMatchesTheREADME(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(readme), "\n## Configuration\n")
	require.True(t, ok)
	table, _, _ = strings.Cut(table, "\n## ")
	documented := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range regexp.MustCompile("`([A-Z][A-Z0-9_]+)`").FindAllStringSubmatch(first, -1) {
			documented[m[1]] = true
		}
	}
	var cfg config
	twins := map[string]bool{}
	flagSet("task-service", &cfg).VisitAll(func(f *flag.Flag) {
		name := settings.EnvName(f)
		require.NotEmpty(t, name, "--%s names no environment twin in its usage", f.Name)
		twins[name] = true
		require.True(t, documented[name], "%s (--%s) is missing from the README's Configuration table", name, f.Name)
	})
	// Secrets have no flag twin (command lines show in ps); taskctl reads
	// DATA_RETENTION.
	envOnly := []string{"ANTHROPIC_API_KEY", "TELEGRAM_BOT_TOKEN", "TELEGRAM_WEBHOOK_SECRET", "DATA_RETENTION"}
	for name := range documented {
		require.True(t, twins[name] || slices.Contains(envOnly, name), "the README documents %s, which nothing reads", name)
	}
}
