package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The start-up line names only what is missing; with everything set and
// the kill switch off it says so instead of asking for the settings.
func TestTelegramStartupMessage(t *testing.T) {
	for _, tc := range []struct {
		cfg  telegramConfig
		want string
	}{
		{telegramConfig{enabled: true, token: "t", chatID: "c"}, "telegram notifications are on"},
		{telegramConfig{token: "t", chatID: "c"},
			"telegram notifications are off (TELEGRAM_ENABLED=false); the bot token and chat are set, so TELEGRAM_ENABLED=true turns them on"},
		{telegramConfig{}, "telegram notifications are off (set TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID to turn them on)"},
		{telegramConfig{token: "t"}, "telegram notifications are off (set TELEGRAM_CHAT_ID to turn them on)"},
		{telegramConfig{chatID: "c"}, "telegram notifications are off (set TELEGRAM_BOT_TOKEN to turn them on)"},
	} {
		require.Equal(t, tc.want, tc.cfg.startupMessage())
	}
}
