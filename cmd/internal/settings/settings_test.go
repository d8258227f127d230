package settings

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type vals struct {
	on    bool
	every time.Duration
	n     int
	level string
}

func newSet(v *vals) *flag.FlagSet {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&v.on, "on", true, "switch (env ON)")
	fs.DurationVar(&v.every, "every", time.Minute, "interval (env EVERY)")
	fs.IntVar(&v.n, "n", 3, "count (env N, default 3)")
	Choice(fs, &v.level, "level", "info", []string{"info", "warn"}, "level (env LEVEL)")
	return fs
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoad(t *testing.T) {
	var v vals
	require.NoError(t, Load(newSet(&v), []string{"--n", "7"}, env(map[string]string{"ON": "Off", "EVERY": " 2s ", "N": "5", "LEVEL": "warn"})))
	require.Equal(t, vals{on: false, every: 2 * time.Second, n: 7, level: "warn"}, v)

	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"EVERY": "7d"}, nil, `EVERY="7d": want a duration with a unit`},
		{map[string]string{"N": "1.5"}, nil, `N="1.5": want a whole number`},
		{map[string]string{"ON": "sometimes"}, nil, `ON="sometimes": want true or false`},
		{map[string]string{"LEVEL": "debug"}, nil, `LEVEL="debug": want one of info, warn`},
		{map[string]string{"LEVEL": "WARN"}, nil, `LEVEL="WARN": want one of info, warn`},
		{map[string]string{"N": "-1"}, nil, `--n (N): is -1; it must not be negative`},
		{nil, []string{"--every", "-1s"}, `--every (EVERY): is -1s; it must not be negative`},
	} {
		var v vals
		err := Load(newSet(&v), c.args, env(c.env))
		require.ErrorContains(t, err, c.want)
		require.False(t, Printed(err))
	}
	var w vals
	err := Load(newSet(&w), []string{"--level", "x"}, env(nil))
	require.True(t, Printed(err), "the flag set printed a bad command line already")
}

func TestEnvBool(t *testing.T) {
	for v, want := range map[string]bool{"yes": true, "ON": true, "1": true, "false": false, "off": false} {
		got, err := EnvBool(env(map[string]string{"B": v}), "B", !want)
		require.NoError(t, err)
		require.Equal(t, want, got, v)
	}
	got, err := EnvBool(env(nil), "B", true)
	require.NoError(t, err)
	require.True(t, got, "unset is the default")
	_, err = EnvBool(env(map[string]string{"B": "sometimes"}), "B", false)
	require.EqualError(t, err, `B="sometimes": want true or false (also 1/0, yes/no, on/off)`)
}
