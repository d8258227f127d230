package api

import (
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/clawdbot/task-service/events"
)

// refCycle finds a reference cycle in a param schema: a chain of $ref (and
// allOf, anyOf, oneOf, not, if/then/else, dependentSchemas) that comes back
// to where it started without moving into the instance (properties, items,
// ...). The validator only notices one while validating a task ({"$ref":"#"}
// fails every task with 400 "reference cycle"), so the type is refused when
// it is created or updated instead. A recursive schema that descends into the
// instance (a tree of children) is no cycle.
func refCycle(doc any) error {
	nodes := map[string]any{}
	anchors := map[string]string{}
	var collect func(ptr string, v any)
	collect = func(ptr string, v any) {
		switch x := v.(type) {
		case map[string]any:
			nodes[ptr] = x
			if a, ok := x["$anchor"].(string); ok {
				anchors[a] = ptr
			}
			if id, ok := x["$id"].(string); ok && strings.HasPrefix(id, "#") {
				anchors[id[1:]] = ptr // draft-07 plain-name fragment
			}
			for k, c := range x {
				collect(ptr+"/"+escapePointer(k), c)
			}
		case []any:
			for i, c := range x {
				collect(ptr+"/"+strconv.Itoa(i), c)
			}
		}
	}
	collect("", doc)

	edges := func(ptr string) []string {
		m, _ := nodes[ptr].(map[string]any)
		var out []string
		for _, kw := range []string{"$ref", "$dynamicRef"} {
			if ref, ok := m[kw].(string); ok && strings.HasPrefix(ref, "#") {
				frag, err := url.PathUnescape(ref[1:])
				if err != nil {
					continue
				}
				if frag == "" || strings.HasPrefix(frag, "/") {
					out = append(out, strings.TrimSuffix(frag, "/"))
				} else if p, ok := anchors[frag]; ok {
					out = append(out, p)
				}
			}
		}
		for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
			if list, ok := m[kw].([]any); ok {
				for i := range list {
					out = append(out, ptr+"/"+kw+"/"+strconv.Itoa(i))
				}
			}
		}
		for _, kw := range []string{"not", "if", "then", "else"} {
			if _, ok := m[kw].(map[string]any); ok {
				out = append(out, ptr+"/"+kw)
			}
		}
		if deps, ok := m["dependentSchemas"].(map[string]any); ok {
			for k := range deps {
				out = append(out, ptr+"/dependentSchemas/"+escapePointer(k))
			}
		}
		sort.Strings(out)
		return out
	}

	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(ptr string) []string
	visit = func(ptr string) []string {
		switch state[ptr] {
		case onPath:
			for i, p := range path {
				if p == ptr {
					return append(append([]string{}, path[i:]...), ptr)
				}
			}
		case done:
			return nil
		}
		state[ptr] = onPath
		path = append(path, ptr)
		for _, next := range edges(ptr) {
			if _, exists := nodes[next]; !exists {
				continue // unresolvable: the compiler says so
			}
			if cycle := visit(next); cycle != nil {
				return cycle
			}
		}
		path = path[:len(path)-1]
		state[ptr] = done
		return nil
	}
	ptrs := make([]string, 0, len(nodes))
	for p := range nodes {
		ptrs = append(ptrs, p)
	}
	sort.Strings(ptrs)
	for _, p := range ptrs {
		if cycle := visit(p); cycle != nil {
			for i := range cycle {
				cycle[i] = "#" + cycle[i]
			}
			return events.Invalid("param_schema", "has a reference cycle: %s (a schema that applies itself to the same value never ends)",
				strings.Join(cycle, " -> "))
		}
	}
	return nil
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
