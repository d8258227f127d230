package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
	_ "time/tzdata" // DIGEST_TZ works on images without a zoneinfo database

	"github.com/clawdbot/task-service/events"
)

// usageConfig is LLM usage's settings: the price table and the team's day
// that daily totals and budgets count in.
type usageConfig struct {
	prices      string
	tz          string
	dayStart    string
	budgetCheck time.Duration
}

func (c *usageConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.prices, "llm-prices", "", `LLM prices in USD per million tokens, as JSON {"model": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}} or @file; entries add to or replace the built-in Claude prices (env LLM_PRICES)`)
	fs.StringVar(&c.tz, "digest-tz", "UTC", "the team's time zone (IANA name): daily usage totals and budgets count in its days (env DIGEST_TZ)")
	fs.StringVar(&c.dayStart, "day-starts-at", "00:00", "the local time (HH:MM or HH:MM:SS in DIGEST_TZ) at which the team's day turns and budget pauses end (env DAY_STARTS_AT)")
	fs.DurationVar(&c.budgetCheck, "budget-check-interval", time.Minute, "how often an instance looks for budget pauses whose day is over (env BUDGET_CHECK_INTERVAL)")
}

// pricesTable is the built-in prices with LLM_PRICES over them.
func (c usageConfig) pricesTable() (events.Prices, error) {
	prices := events.DefaultPrices()
	raw := strings.TrimSpace(c.prices)
	if raw == "" {
		return prices, nil
	}
	if path, ok := strings.CutPrefix(raw, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("LLM_PRICES: %w", err)
		}
		raw = string(b)
	}
	var extra events.Prices
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&extra); err != nil {
		return nil, fmt.Errorf(`LLM_PRICES is not a JSON object like {"claude-sonnet-4-5": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}: %w`, err)
	}
	if err := extra.Validate(); err != nil {
		return nil, fmt.Errorf("LLM_PRICES: %w", err)
	}
	for model, p := range extra {
		prices[model] = p
	}
	return prices, nil
}

// teamDay reads DIGEST_TZ and DAY_STARTS_AT.
func (c usageConfig) teamDay() (events.TeamDay, error) {
	loc, err := time.LoadLocation(c.tz)
	if err != nil {
		return events.TeamDay{}, fmt.Errorf("DIGEST_TZ %q is not a time zone like Europe/Berlin: %w", c.tz, err)
	}
	var start time.Time
	for _, layout := range []string{"15:04", "15:04:05"} {
		if start, err = time.Parse(layout, c.dayStart); err == nil {
			break
		}
	}
	if err != nil {
		return events.TeamDay{}, fmt.Errorf("DAY_STARTS_AT %q is not a time like 00:00 or 06:30", c.dayStart)
	}
	return events.TeamDay{Loc: loc, Start: start.Sub(start.Truncate(24 * time.Hour))}, nil
}
