package events

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPricesFindTheLongestPrefixAndCost(t *testing.T) {
	p := DefaultPrices()
	pr, ok := p.Find("claude-sonnet-4-5-20250929")
	require.True(t, ok)
	require.Equal(t, 3.0, pr.Input)
	pr, ok = p.Find("claude-opus-4-1-20250805")
	require.True(t, ok)
	require.Equal(t, 15.0, pr.Input, "claude-opus-4-1, not claude-opus-4")
	_, ok = p.Find("gpt-5")
	require.False(t, ok)

	cost, src := p.Cost(UsageReport{Model: "claude-sonnet-4-5", InputTokens: 1_000_000, OutputTokens: 100_000,
		CacheReadTokens: 2_000_000, CacheWriteTokens: 10_000})
	require.Equal(t, CostFromPrices, src)
	require.InDelta(t, 3+1.5+0.6+0.0375, cost, 1e-9)
	given := 1.2345678
	cost, src = p.Cost(UsageReport{Model: "gpt-5", CostUSD: &given})
	require.Equal(t, CostFromWorker, src)
	require.Equal(t, 1.234568, cost, "rounded to millionths")
	cost, src = p.Cost(UsageReport{Model: "gpt-5", InputTokens: 9})
	require.Equal(t, CostUnpriced, src)
	require.Zero(t, cost)
}

func TestTeamDayTurnsAtItsStart(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	d := TeamDay{Loc: berlin, Start: 6 * time.Hour}
	at := time.Date(2026, 11, 26, 4, 59, 0, 0, time.UTC) // 05:59 in Berlin
	require.Equal(t, "2026-11-25", d.Of(at))
	require.Equal(t, "2026-11-26", d.Of(at.Add(time.Minute)))
	require.Equal(t, time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC), d.Next(at).UTC())
	require.Equal(t, "06:00 Europe/Berlin", d.String())
	require.Equal(t, "2026-11-26", TeamDay{}.Of(time.Date(2026, 11, 26, 23, 59, 0, 0, time.UTC)))
}
