package projections

import (
	"fmt"
	"strings"
)

// upsert builds "INSERT ... ON CONFLICT (id) DO UPDATE" for a row keyed by
// its first column; casts names the columns whose parameter needs one.
func upsert(table string, cols []string, casts map[string]string) string {
	params := make([]string, len(cols))
	sets := make([]string, 0, len(cols)-1)
	for i, c := range cols {
		params[i] = fmt.Sprintf("$%d", i+1)
		if cast, ok := casts[c]; ok {
			params[i] += "::" + cast
		}
		if i > 0 {
			sets = append(sets, c+" = excluded."+c)
		}
	}
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (%s) DO UPDATE SET %s",
		table, strings.Join(cols, ", "), strings.Join(params, ", "), cols[0], strings.Join(sets, ", "))
}
