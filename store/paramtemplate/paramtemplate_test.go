package paramtemplate_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/store/paramtemplate"
)

func TestRenderSubstitutesInsideStrings(t *testing.T) {
	tpl, err := paramtemplate.Parse(`{"ticker": "{{key}}", "query": "{{ key }} since {{since}}", "n": 3, "tags": ["a", "{{key}}"], "x": {"ok": true, "none": null}}`)
	require.NoError(t, err)
	assert.Equal(t, []string{"key", "since"}, tpl.Names())

	out, err := tpl.Render(map[string]string{"key": "NVDA", "since": "2026-01-01", "unused": "x"})
	require.NoError(t, err)
	assert.JSONEq(t, `{"ticker":"NVDA","query":"NVDA since 2026-01-01","n":3,"tags":["a","NVDA"],"x":{"ok":true,"none":null}}`, string(out))
	// Key order and number text are kept as written.
	assert.Equal(t, `{"ticker":"NVDA","query":"NVDA since 2026-01-01","n":3,"tags":["a","NVDA"],"x":{"ok":true,"none":null}}`, string(out))
}

func TestRenderEscapesHostileValues(t *testing.T) {
	tpl, err := paramtemplate.Parse(`{"ticker": "{{key}}", "n": 1}`)
	require.NoError(t, err)
	for _, v := range []string{`", "admin": true, "x": "`, `\`, "a\nb\x00", `</script>&`, `{{key}}`, "ünï"} {
		out, err := tpl.Render(map[string]string{"key": v})
		require.NoError(t, err, v)
		var got map[string]any
		require.NoError(t, json.Unmarshal(out, &got), string(out))
		assert.Equal(t, map[string]any{"ticker": v, "n": float64(1)}, got)
	}
}

func TestParseRefusesWithTheReason(t *testing.T) {
	for text, want := range map[string]string{
		``:                        "empty",
		`[1]`:                     "JSON object",
		`"{{key}}"`:               "JSON object",
		`{"ticker": {{key}}}`:     "at byte 12",
		`{"ticker": "{{key}"}`:    "not closed",
		`{"ticker": "{{ke y}}"}`:  "a name is letters",
		`{"ticker": "{{1x}}"}`:    "a name is letters",
		`{"ticker": "{{}}"}`:      "a name is letters",
		`{"{{key}}": 1}`:          "object key",
		`{"a": 1, "a": 2}`:        "duplicate key",
		`{"a": 1`:                 "ends before",
		`{"a": 1} {}`:             "after the closing",
		`{"a": 1} x`:              "at byte",
		`{"a": 1,}`:               "at byte",
		`{"a" 1}`:                 "at byte",
		"{\"a\": \"\xff\"}":       "UTF-8",
		`{"a": ` + deep(40) + `}`: "deeper than 32",
		`{"a": "` + strings.Repeat("x", paramtemplate.MaxTemplateLen) + `"}`: "longer than",
	} {
		_, err := paramtemplate.Parse(text)
		if assert.Error(t, err, text) {
			assert.Contains(t, err.Error(), want, text)
		}
	}
}

func TestParseRefusesTooManyPlaceholders(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"a": "`)
	for i := 0; i <= paramtemplate.MaxPlaceholder; i++ {
		b.WriteString("{{v" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "}}")
	}
	b.WriteString(`"}`)
	_, err := paramtemplate.Parse(b.String())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "placeholders")
}

func TestRenderRefusesMissingOrOversizeValues(t *testing.T) {
	tpl, err := paramtemplate.Parse(`{"ticker": "{{key}}", "sub": "{{sub}}"}`)
	require.NoError(t, err)
	_, err = tpl.Render(map[string]string{"key": "NVDA"})
	require.ErrorContains(t, err, "no value for {{sub}}")
	_, err = tpl.Render(map[string]string{"key": strings.Repeat("x", paramtemplate.MaxValueLen+1), "sub": ""})
	require.ErrorContains(t, err, "longer than")
	_, err = tpl.Render(map[string]string{"key": "\xff", "sub": ""})
	require.ErrorContains(t, err, "UTF-8")

	// Many placeholders of big values cannot render past the cap.
	big, err := paramtemplate.Parse(`{"a": "` + strings.Repeat("{{key}}", 100) + `"}`)
	require.NoError(t, err)
	_, err = big.Render(map[string]string{"key": strings.Repeat("x", paramtemplate.MaxValueLen)})
	require.ErrorContains(t, err, "renders to more than")
}

func TestTitle(t *testing.T) {
	tpl, err := paramtemplate.ParseTitle("Reddit crawl for {{key}} ({{sub}})")
	require.NoError(t, err)
	assert.Equal(t, []string{"key", "sub"}, tpl.Names())
	got, err := tpl.Render(map[string]string{"key": `NVDA"<&>`, "sub": "wsb"})
	require.NoError(t, err)
	assert.Equal(t, `Reddit crawl for NVDA"<&> (wsb)`, got)

	plain, err := paramtemplate.ParseTitle("Nightly sweep")
	require.NoError(t, err)
	got, err = plain.Render(nil)
	require.NoError(t, err)
	assert.Equal(t, "Nightly sweep", got)

	_, err = tpl.Render(map[string]string{"key": "a\nb", "sub": ""})
	require.ErrorContains(t, err, "control character")
	_, err = tpl.Render(map[string]string{"key": "x"})
	require.ErrorContains(t, err, "no value for {{sub}}")
	only, err := paramtemplate.ParseTitle("{{key}}")
	require.NoError(t, err)
	_, err = only.Render(map[string]string{"key": "  "})
	require.ErrorContains(t, err, "empty")
	long, err := paramtemplate.ParseTitle(strings.Repeat("x", 490) + "{{key}}")
	require.NoError(t, err)
	_, err = long.Render(map[string]string{"key": "12345678901"})
	require.ErrorContains(t, err, "more than 500")

	for text, want := range map[string]string{
		"":                       "empty",
		"  ":                     "empty",
		"crawl {{key":            "not closed",
		"crawl {{k-y}}":          "a name is letters",
		strings.Repeat("x", 501): "longer than 500",
		"\xff":                   "UTF-8",
	} {
		_, err := paramtemplate.ParseTitle(text)
		if assert.Error(t, err, text) {
			assert.Contains(t, err.Error(), want, text)
		}
	}
}

func FuzzRenderIsValidJSON(f *testing.F) {
	f.Add(`{"ticker": "{{key}}"}`, "NVDA")
	f.Add(`{"a": ["{{key}}", {"b": "x{{key}}y"}], "n": -1.5e3}`, `"\`)
	f.Fuzz(func(t *testing.T, text, value string) {
		tpl, err := paramtemplate.Parse(text)
		if err != nil {
			return
		}
		vars := map[string]string{}
		for _, n := range tpl.Names() {
			vars[n] = value
		}
		out, err := tpl.Render(vars)
		if err != nil {
			return
		}
		if !json.Valid(out) || out[0] != '{' {
			t.Fatalf("template %q with %q rendered %q", text, value, out)
		}
	})
}

func deep(n int) string {
	return strings.Repeat("[", n) + strings.Repeat("]", n)
}
