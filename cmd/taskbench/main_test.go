package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTaskbenchCommandLine(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, exitUsage, run(nil, &out, &errOut), "bare: help on stderr, exit 2")
	require.Contains(t, errOut.String(), "lanes")
	require.Empty(t, out.String())

	out.Reset()
	require.Equal(t, exitOK, run([]string{"--help"}, &out, &errOut))
	for _, c := range []string{"lanes", "wake", "scale", "version"} {
		require.Contains(t, out.String(), "  "+c)
	}

	errOut.Reset()
	require.Equal(t, exitUsage, run([]string{"bench"}, &out, &errOut))
	require.Contains(t, errOut.String(), `unknown command "bench"`)

	out.Reset()
	require.Equal(t, exitOK, run([]string{"--version"}, &out, &errOut))
	require.Contains(t, out.String(), "taskbench ")

	out.Reset()
	require.Equal(t, exitOK, run([]string{"lanes", "--help"}, &out, &errOut))
	require.Contains(t, out.String()+errOut.String(), "Usage: taskbench lanes")
}
