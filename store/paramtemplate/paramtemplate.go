// Package paramtemplate renders a task's params and title from templates
// with {{name}} placeholders, such as {"ticker": "{{key}}"} and
// "Reddit crawl for {{key}}". It is pure: no clock, no database.
//
// A params template is JSON text. Placeholders may appear only inside JSON
// string values (never in object keys, never as bare values), so every
// rendering is valid JSON whatever the substituted text holds: the values
// are JSON-escaped as part of the string they land in. A title template is
// plain text. Names are letters, digits and underscores, starting with a
// letter or underscore ({{ key }} with spaces is the same as {{key}});
// "{{" always opens a placeholder.
//
// Parse and ParseTitle check a template once; Render fills it. Errors
// from both say what is wrong and, for Parse, at which byte; callers that
// answer a client wrap them with the field name (for example
// events.Invalid("params_template", "%v", err)).
package paramtemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Key is the placeholder a freshness rule fills with each watched key.
const Key = "key"

// Limits. They keep a template, what it renders and the work of both bounded.
const (
	MaxTemplateLen = 16 << 10 // bytes of params template text
	MaxTitleLen    = 500      // characters of title template and rendered title
	MaxValueLen    = 1000     // bytes of one substituted value
	MaxRenderedLen = 64 << 10 // bytes of rendered params
	MaxDepth       = 32       // nesting of arrays and objects
	MaxNameLen     = 64       // bytes of a placeholder name
	MaxPlaceholder = 100      // placeholders in one template
)

// Template is a parsed params template. It is immutable and safe for
// concurrent use.
type Template struct {
	tokens []token
	names  []string
}

// Title is a parsed title template. It is immutable and safe for
// concurrent use.
type Title struct {
	parts []part
	names []string
}

// token is one JSON token of a params template, with the separator
// ("," or ":" or "") that comes before it.
type token struct {
	sep   string
	raw   string // the token's JSON text when it holds no placeholder
	parts []part // a string value with placeholders: filled, then encoded
}

// part is literal text or, when name is set, a placeholder.
type part struct {
	text string
	name string
}

// Parse checks a params template: JSON text whose top level is an object,
// with placeholders only inside string values.
func Parse(text string) (*Template, error) {
	if len(text) > MaxTemplateLen {
		return nil, fmt.Errorf("is longer than %d bytes", MaxTemplateLen)
	}
	if !utf8.ValidString(text) {
		return nil, errors.New("is not valid UTF-8")
	}
	p := parser{dec: json.NewDecoder(strings.NewReader(text)), names: map[string]bool{}}
	p.dec.UseNumber()
	if err := p.run(); err != nil {
		return nil, err
	}
	return &Template{tokens: p.tokens, names: sortedNames(p.names)}, nil
}

// Names lists the template's placeholder names, sorted.
func (t *Template) Names() []string { return append([]string(nil), t.names...) }

// Render fills every placeholder from vars and returns the params. A
// placeholder with no value in vars is an error naming it; extra vars are
// ignored.
func (t *Template) Render(vars map[string]string) (json.RawMessage, error) {
	if err := checkVars(t.names, vars); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, tok := range t.tokens {
		out.WriteString(tok.sep)
		if tok.parts == nil {
			out.WriteString(tok.raw)
		} else {
			out.Write(encodeString(fill(tok.parts, vars)))
		}
		if out.Len() > MaxRenderedLen {
			return nil, fmt.Errorf("renders to more than %d bytes", MaxRenderedLen)
		}
	}
	return json.RawMessage(out.Bytes()), nil
}

// ParseTitle checks a title template: plain text with placeholders.
func ParseTitle(text string) (*Title, error) {
	if !utf8.ValidString(text) {
		return nil, errors.New("is not valid UTF-8")
	}
	if utf8.RuneCountInString(text) > MaxTitleLen {
		return nil, fmt.Errorf("is longer than %d characters", MaxTitleLen)
	}
	if strings.TrimSpace(text) == "" {
		return nil, errors.New("is empty")
	}
	names := map[string]bool{}
	parts, err := split(text, 0, names)
	if err != nil {
		return nil, err
	}
	return &Title{parts: parts, names: sortedNames(names)}, nil
}

// Names lists the title's placeholder names, sorted.
func (t *Title) Names() []string { return append([]string(nil), t.names...) }

// Render fills every placeholder from vars. Values with control characters
// (a newline in a title) are refused, and so is a result longer than
// MaxTitleLen characters.
func (t *Title) Render(vars map[string]string) (string, error) {
	if err := checkVars(t.names, vars); err != nil {
		return "", err
	}
	for _, name := range t.names {
		if strings.IndexFunc(vars[name], unicode.IsControl) >= 0 {
			return "", fmt.Errorf("value of {{%s}} holds a control character", name)
		}
	}
	title := strings.TrimSpace(fill(t.parts, vars))
	if utf8.RuneCountInString(title) > MaxTitleLen {
		return "", fmt.Errorf("renders to more than %d characters", MaxTitleLen)
	}
	if title == "" {
		return "", errors.New("renders to an empty title")
	}
	return title, nil
}

type parser struct {
	dec    *json.Decoder
	tokens []token
	names  map[string]bool
}

// frame is one open array or object while parsing.
type frame struct {
	object  bool
	count   int             // values so far
	wantKey bool            // object: the next token is a key
	keys    map[string]bool // object: keys so far, to refuse duplicates
}

func (p *parser) run() error {
	var stack []*frame
	for {
		offset := p.dec.InputOffset()
		tok, err := p.dec.Token()
		if err == io.EOF {
			if len(p.tokens) == 0 {
				return errors.New("is empty: want a JSON object")
			}
			if len(stack) > 0 {
				return errors.New("ends before the JSON is complete")
			}
			return nil
		}
		if err != nil {
			return syntaxError(err)
		}
		if len(p.tokens) == 0 && tok != json.Delim('{') {
			return errors.New("must be a JSON object")
		}
		if len(p.tokens) > 0 && len(stack) == 0 {
			return fmt.Errorf("at byte %d: text after the closing }", offset)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		next := token{}
		isClose := tok == json.Delim('}') || tok == json.Delim(']')
		switch {
		case top == nil || isClose:
		case top.object && top.wantKey:
			if top.count > 0 {
				next.sep = ","
			}
		case top.object:
			next.sep = ":"
		case top.count > 0:
			next.sep = ","
		}
		isKey := top != nil && top.object && top.wantKey && !isClose
		switch v := tok.(type) {
		case json.Delim:
			next.raw = v.String()
			if isClose {
				stack = stack[:len(stack)-1]
			} else {
				if len(stack) >= MaxDepth {
					return fmt.Errorf("at byte %d: nests deeper than %d levels", offset, MaxDepth)
				}
				stack = append(stack, &frame{object: v == '{', wantKey: v == '{', keys: map[string]bool{}})
			}
		case string:
			parts, err := split(v, offset, p.names)
			if err != nil {
				return err
			}
			if isKey {
				if len(parts) != 1 || parts[0].name != "" {
					return fmt.Errorf("at byte %d: object key %q holds a placeholder; placeholders go in string values only", offset, v)
				}
				if top.keys[v] {
					return fmt.Errorf("at byte %d: duplicate key %q", offset, v)
				}
				top.keys[v] = true
			}
			if len(parts) == 1 && parts[0].name == "" {
				next.raw = string(encodeString(v))
			} else {
				next.parts = parts
			}
		case json.Number:
			next.raw = v.String()
		case bool:
			next.raw = fmt.Sprint(v)
		case nil:
			next.raw = "null"
		}
		if top != nil && !isClose {
			if top.object && top.wantKey {
				top.wantKey = false
			} else {
				top.count++
				top.wantKey = top.object
			}
		}
		p.tokens = append(p.tokens, next)
		if len(p.names) > MaxPlaceholder {
			return fmt.Errorf("has more than %d distinct placeholders", MaxPlaceholder)
		}
	}
}

// split cuts s into literal text and placeholders. offset places errors.
func split(s string, offset int64, names map[string]bool) ([]part, error) {
	var parts []part
	for {
		open := strings.Index(s, "{{")
		if open < 0 {
			break
		}
		end := strings.Index(s[open:], "}}")
		if end < 0 {
			return nil, fmt.Errorf("near byte %d: placeholder %q is not closed with }}", offset, clip(s[open:]))
		}
		name := strings.TrimSpace(s[open+2 : open+end])
		if !validName(name) {
			return nil, fmt.Errorf("near byte %d: placeholder %q: a name is letters, digits and _ (at most %d), starting with a letter or _", offset, clip(s[open:open+end+2]), MaxNameLen)
		}
		if open > 0 {
			parts = append(parts, part{text: s[:open]})
		}
		parts = append(parts, part{name: name})
		names[name] = true
		s = s[open+end+2:]
	}
	if s != "" || len(parts) == 0 {
		parts = append(parts, part{text: s})
	}
	return parts, nil
}

func validName(name string) bool {
	if name == "" || len(name) > MaxNameLen {
		return false
	}
	for i, r := range name {
		letter := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return true
}

func checkVars(names []string, vars map[string]string) error {
	for _, name := range names {
		v, ok := vars[name]
		if !ok {
			return fmt.Errorf("no value for {{%s}}", name)
		}
		if len(v) > MaxValueLen {
			return fmt.Errorf("value of {{%s}} is longer than %d bytes", name, MaxValueLen)
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("value of {{%s}} is not valid UTF-8", name)
		}
	}
	return nil
}

func fill(parts []part, vars map[string]string) string {
	var b strings.Builder
	for _, p := range parts {
		if p.name != "" {
			b.WriteString(vars[p.name])
		} else {
			b.WriteString(p.text)
		}
	}
	return b.String()
}

// encodeString is s as a JSON string, with <, > and & left as they are.
func encodeString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func syntaxError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("at byte %d: %s (placeholders go inside JSON strings: \"{{key}}\")", se.Offset, se.Error())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("ends before the JSON is complete")
	}
	return fmt.Errorf("is not valid JSON: %w", err)
}

func clip(s string) string {
	if utf8.RuneCountInString(s) > 40 {
		return string([]rune(s)[:40]) + "…"
	}
	return s
}

func sortedNames(set map[string]bool) []string {
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
