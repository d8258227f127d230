package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
)

var statsSpec = cmdSpec{
	name: "stats", args: "[--json]",
	summary: "Show the dashboard's numbers: tasks per status, the queue, workers online, retries and\n" +
		"stuck tasks, reactor lag (what the server reports; newer servers may report more).",
	example: "taskctl stats",
}

func (a *app) stats(args []string) int {
	spec := statsSpec
	fs := flagSet(spec)
	api := apiFlag(fs)
	asJSON := fs.Bool("json", false, "print the stats as JSON")
	call, code := a.start(fs, spec, args, api, 0, "")
	if call == nil {
		return code
	}
	defer call.cancel()
	c, ctx := call.c, call.ctx
	st, err := c.Stats(ctx)
	if err != nil {
		return a.fail(spec.name, err)
	}
	if *asJSON {
		return a.printJSON(st)
	}
	tw := a.table()
	if by, ok := st["by_status"].(map[string]any); ok {
		fmt.Fprintln(tw, "Tasks by status")
		for _, s := range []string{"pending", "in_progress", "completed", "failed", "cancelled"} {
			fmt.Fprintf(tw, "  %s\t%v\n", s, by[s])
			delete(by, s)
		}
		printFlat(tw, "  ", "", by)
		delete(st, "by_status")
	}
	if on, ok := st["workers_online"]; ok {
		fmt.Fprintf(tw, "Workers online\t%v of %v\n", on, st["workers_total"])
		delete(st, "workers_online")
		delete(st, "workers_total")
	}
	printFlat(tw, "", "", st)
	tw.Flush()
	return exitOK
}

// printFlat prints nested JSON values as aligned "key  value" lines, in
// key order; lists of objects become one line per item.
func printFlat(tw *tabwriter.Writer, indent, prefix string, m map[string]any) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		label := humanKey(prefix + k)
		switch v := m[k].(type) {
		case map[string]any:
			printFlat(tw, indent, prefix+k+".", v)
		case []any:
			if len(v) == 0 {
				fmt.Fprintf(tw, "%s%s\t-\n", indent, label)
			}
			for _, item := range v {
				fmt.Fprintf(tw, "%s%s\t%s\n", indent, label, inline(item))
			}
		case nil:
			fmt.Fprintf(tw, "%s%s\t-\n", indent, label)
		default:
			fmt.Fprintf(tw, "%s%s\t%v\n", indent, label, v)
		}
	}
}

// humanKey turns queue_depth into "Queue depth".
func humanKey(k string) string {
	k = strings.NewReplacer("_", " ", ".", " ").Replace(k)
	if k == "" {
		return k
	}
	return strings.ToUpper(k[:1]) + k[1:]
}

// inline is a compact one-line form of a list item: k=v pairs for objects.
func inline(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		b, _ := json.Marshal(v)
		return string(b)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		val := m[k]
		if s, ok := val.(string); ok {
			parts = append(parts, k+"="+s)
			continue
		}
		b, _ := json.Marshal(val)
		parts = append(parts, k+"="+string(b))
	}
	return strings.Join(parts, " ")
}
