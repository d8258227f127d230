package api

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clawdbot/task-service/events"
)

// nested is a JSON array n levels deep around 1.
func nested(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }

// The depth bound counts levels inside the free-form fields, whatever the
// request's own structure around them, and names the field.
func TestCheckDepth(t *testing.T) {
	envelope := func(v any) int { return envelopeOf(reflect.TypeOf(v)) }
	require.Equal(t, 1, envelope(&resultRequest{}))
	require.Equal(t, 1, envelope(&heartbeatRequest{}))
	require.Equal(t, 1, envelope(&createTaskRequest{}))
	require.Equal(t, 2, envelope(&taskTypeRequest{}), "rate_limit is an object")
	require.Equal(t, 1, envelope(&finishItem{}))
	require.Equal(t, 2, envelope(&ScheduleRequest{}), "task.params is one level down")
	require.Equal(t, 2, envelope(&events.ScheduleSpec{}))

	for _, c := range []struct {
		body     string
		envelope int
		field    string // "" when accepted
	}{
		{`{"result":` + nested(MaxJSONDepth) + `}`, 1, ""},
		{`{"result":` + nested(MaxJSONDepth+1) + `}`, 1, "result"},
		{`{"a":1,"result":` + nested(9000) + `}`, 1, "result"},
		{`{"r\u00e9sult":` + nested(MaxJSONDepth+1) + `}`, 1, "résult"},
		{`{"s":"[[[[{{{{\"]]","result":` + nested(MaxJSONDepth) + `}`, 1, ""},
		{`{"s":"\\","result":` + nested(MaxJSONDepth+1) + `}`, 1, "result"},
		{`{"task":{"title":"t","params":{"x":` + nested(MaxJSONDepth-1) + `}}}`, 2, ""},
		{`{"task":{"title":"t","params":{"x":` + nested(MaxJSONDepth) + `}}}`, 2, "task.params"},
		{`[{"id":"a"},{"id":"b","result":` + nested(MaxJSONDepth+1) + `}]`, 2, "[1].result"},
		{nested(MaxJSONDepth + 1), 0, "params"},
		{`{"unclosed":"` + nested(500), 1, ""},
	} {
		err := checkDepth([]byte(c.body), c.envelope, map[bool]string{true: "params"}[c.envelope == 0])
		if c.field == "" {
			require.NoError(t, err, c.body[:min(len(c.body), 80)])
			continue
		}
		var ve *events.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, c.field, ve.Field)
		require.Contains(t, ve.Message, "nests deeper than 64 levels")
	}
}

func TestFirstLoneSurrogate(t *testing.T) {
	for raw, want := range map[string]int{
		`{"a":"x"}`:                       -1,
		`{"a":"\ud83d\ude00"}`:            -1, // a pair: 😀
		`{"a":"\uD83D\uDE00"}`:            -1,
		`{"a":"\ud800"}`:                  6,
		`{"a":"\ud800x"}`:                 6,
		`{"a":"\ud800\u0041"}`:            6,
		`{"a":"\udc00"}`:                  6,
		`{"a":"\ude00\ud83d"}`:            6,
		`{"a":"\\ud800"}`:                 -1, // text, not an escape
		`{"a":"\\\ud800"}`:                8,
		`{"\ud800":1}`:                    2,
		`{"a":"\n\t\"","b":"\udbff"}`:     19,
		`{"a":"\ud83d\ude00","b":"\ud83d`: 25,
	} {
		require.Equal(t, want, firstLoneSurrogate([]byte(raw)), raw)
	}
}
