package main_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// After an outage long enough for the listener's reconnect backoff to grow,
// /readyz turns ready within about a second of the database's return: the
// backoff is capped at 1 s (a load balancer would otherwise keep a healthy
// instance out for up to 10 s more).
func TestReadyzFollowsTheDatabaseBack(t *testing.T) {
	t.Parallel()
	pg := startPrivatePG(t)
	s := startServer(t, pg.url)
	ready := func() bool {
		resp, err := http.Get(s.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	require.NoError(t, pg.stop("fast"))
	require.Eventually(t, func() bool { return !ready() }, 10*time.Second, 50*time.Millisecond)
	time.Sleep(5 * time.Second) // the outage: doubling from 100 ms, the backoff would reach 3.2 s
	require.NoError(t, pg.start())
	back := time.Now()
	for !ready() {
		require.Less(t, time.Since(back), 5*time.Second, "/readyz still 503 5 s after the database came back")
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("/readyz ready %v after the database accepted connections again", time.Since(back).Round(time.Millisecond))
	require.Less(t, time.Since(back), 2*time.Second)
}
