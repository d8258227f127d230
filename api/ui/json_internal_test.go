package ui

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Within its bounds indentJSON writes what json.Indent writes.
func TestIndentJSONAsJSONIndent(t *testing.T) {
	for _, raw := range []string{
		`{}`, `[]`, `1`, `"s"`, `null`, `{"a":1}`, `[1,2,3]`, `{"a":{},"b":[],"c":[{}]}`,
		`{"text":"quote \" brace { bracket [ colon : comma , backslash \\","n":-1.5e3}`,
		`{"a":[{"b":{"c":[1,{"d":null}]}}],"e":true,"f":"\u00e9\ud83d\ude00"}`,
		" { \"spaced\" :\n[ 1 ,\t2 ] } ",
	} {
		var want bytes.Buffer
		require.NoError(t, json.Indent(&want, []byte(strings.TrimSpace(raw)), "", "  "))
		got, cut := indentJSON([]byte(raw), maxShownJSON)
		require.False(t, cut, raw)
		require.Equal(t, want.String(), got, raw)
	}
}

// Past its bounds its output stays small whatever the depth, and says it
// was cut; a form gets the value whole, compact.
func TestIndentJSONIsBounded(t *testing.T) {
	deep := strings.Repeat("[", 9000) + strings.Repeat("]", 9000)
	got, cut := indentJSON([]byte(deep), maxShownJSON)
	require.True(t, cut)
	require.LessOrEqual(t, len(got), maxShownJSON)
	for _, line := range strings.Split(got, "\n") {
		require.LessOrEqual(t, len(line), 2*maxIndentLevels+1)
	}
	require.Equal(t, deep, formJSON([]byte(deep)), "a form holds the value as stored")

	long := `{"s":"` + strings.Repeat("é", 100_000) + `"}`
	got, cut = indentJSON([]byte(long), 1001)
	require.True(t, cut)
	require.LessOrEqual(t, len(got), 1001)
	require.True(t, strings.HasPrefix(got, "{\n  \"s\": \"éé"))
	require.NotContains(t, got, "\uFFFD", "never half a character")

	shown := showJSON([]byte(deep), maxShownRowJSON, "/x.json")
	require.True(t, shown.Cut)
	require.EqualValues(t, len(deep), shown.Size)
	require.Equal(t, "/x.json", shown.Raw)
	require.Equal(t, shownJSON{}, showJSON([]byte(" null "), maxShownJSON, "/x.json"))
}
