package ui_test

import (
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The status colours read at 4.5:1 or more (WCAG AA for text) on the chip,
// the panel and the page background, in the light and the dark theme.
func TestStatusColoursContrast(t *testing.T) {
	css, err := os.ReadFile("static/app.css")
	require.NoError(t, err)
	themes := regexp.MustCompile(`(?s):root \{(.*?)\}`).FindAllStringSubmatch(string(css), -1)
	require.Len(t, themes, 2, "a light and a dark :root")
	for i, theme := range themes {
		vars := map[string]string{}
		for _, m := range regexp.MustCompile(`--([a-z-]+): (#[0-9a-f]{6}|#[0-9a-f]{3})\b`).FindAllStringSubmatch(theme[1], -1) {
			vars[m[1]] = m[2]
		}
		for _, fg := range []string{"ok", "warn", "bad", "info", "muted", "text"} {
			for _, bg := range []string{"chip", "panel", "bg"} {
				ratio := contrast(vars[fg], vars[bg])
				require.GreaterOrEqual(t, ratio, 4.5, "theme %d: --%s %s on --%s %s is %.2f:1", i, fg, vars[fg], bg, vars[bg], ratio)
			}
		}
		// The filled buttons: primary and danger.
		for fg, bg := range map[string]string{"accent-text": "accent", "bad-text": "bad"} {
			ratio := contrast(vars[fg], vars[bg])
			require.GreaterOrEqual(t, ratio, 4.5, "theme %d: --%s %s on --%s %s is %.2f:1", i, fg, vars[fg], bg, vars[bg], ratio)
		}
	}
}

func contrast(a, b string) float64 {
	la, lb := luminance(a), luminance(b)
	return (math.Max(la, lb) + 0.05) / (math.Min(la, lb) + 0.05)
}

func luminance(hex string) float64 {
	hex = strings.TrimPrefix(hex, "#")
	if len(hex) == 3 { // #fff is #ffffff
		hex = string([]byte{hex[0], hex[0], hex[1], hex[1], hex[2], hex[2]})
	}
	var l float64
	for i, w := range []float64{0.2126, 0.7152, 0.0722} {
		v, _ := strconv.ParseUint(hex[2*i:2*i+2], 16, 8)
		c := float64(v) / 255
		if c <= 0.03928 {
			c /= 12.92
		} else {
			c = math.Pow((c+0.055)/1.055, 2.4)
		}
		l += w * c
	}
	return l
}
