// Package settings reads a command's flags and their environment twins
// from one table: the flag set. A flag's usage names its twin, "(env
// NAME)"; the environment sets the flag, and the command line wins over it.
// Every value goes through the flag's own parser, so a bad value stops the
// start with the variable, the value and what is accepted, instead of
// silently becoming the default.
package settings

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"time"
)

var twin = regexp.MustCompile(`\(env ([A-Z][A-Z0-9_]*)[,;)]`)

// EnvName is the environment twin named in a flag's usage, or "".
func EnvName(f *flag.Flag) string {
	if m := twin.FindStringSubmatch(f.Usage); m != nil {
		return m[1]
	}
	return ""
}

// Load sets fs's flags from their environment twins (lookup is os.LookupEnv
// in a binary), then parses args. An empty variable counts as unset.
func Load(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := EnvName(f)
		if name == "" {
			return
		}
		v, ok := lookup(name)
		if !ok || strings.TrimSpace(v) == "" {
			return
		}
		if err := set(f, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %s", name, v, err))
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return commandLineError{err}
	}
	errs = nil
	fs.VisitAll(func(f *flag.Flag) {
		if err := notNegative(f); err != nil {
			errs = append(errs, fmt.Errorf("--%s%s: %w", f.Name, twinNote(f), err))
		}
	})
	return errors.Join(errs...)
}

func twinNote(f *flag.Flag) string {
	if name := EnvName(f); name != "" {
		return " (" + name + ")"
	}
	return ""
}

// set parses v with f's parser; bools also take yes/no and on/off, as the
// environment often spells them.
func set(f *flag.Flag, v string) error {
	v = strings.TrimSpace(v)
	if isBool(f) {
		if b, ok := boolWord(v); ok {
			v = fmt.Sprint(b)
		}
	}
	if err := f.Value.Set(v); err != nil {
		return fmt.Errorf("want %s", Accepted(f))
	}
	return nil
}

func boolWord(v string) (value, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "t", "yes", "y", "on":
		return true, true
	case "0", "false", "f", "no", "n", "off":
		return false, true
	}
	return false, false
}

// EnvBool reads a boolean that only the environment sets, taking the words
// Load takes; unset or empty is def.
func EnvBool(lookup func(string) (string, bool), name string, def bool) (bool, error) {
	v, ok := lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return def, nil
	}
	b, ok := boolWord(v)
	if !ok {
		return def, fmt.Errorf("%s=%q: want true or false (also 1/0, yes/no, on/off)", name, v)
	}
	return b, nil
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Accepted says in words what a flag's value may be.
func Accepted(f *flag.Flag) string {
	if c, ok := f.Value.(*choice); ok {
		return "one of " + strings.Join(c.allowed, ", ")
	}
	if isBool(f) {
		return "true or false (also 1/0, yes/no, on/off)"
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return "a valid value"
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a duration with a unit, such as 90s, 30m or 24h (units: ms, s, m, h)"
	case int, int64, uint, uint64:
		return "a whole number"
	case float64:
		return "a number"
	}
	return "a valid value"
}

// notNegative refuses a negative number or duration: none of the settings
// means anything below zero.
func notNegative(f *flag.Flag) error {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return nil
	}
	neg := false
	switch v := g.Get().(type) {
	case time.Duration:
		neg = v < 0
	case int:
		neg = v < 0
	case int64:
		neg = v < 0
	case float64:
		neg = v < 0
	}
	if neg {
		return fmt.Errorf("is %s; it must not be negative", f.Value.String())
	}
	return nil
}

// choice is a string flag with a fixed set of values.
type choice struct {
	p       *string
	allowed []string
}

// Choice defines a string flag that takes only the allowed values.
func Choice(fs *flag.FlagSet, p *string, name, def string, allowed []string, usage string) {
	*p = def
	fs.Var(&choice{p: p, allowed: allowed}, name, usage)
}

func (c *choice) String() string {
	if c.p == nil {
		return ""
	}
	return *c.p
}

func (c *choice) Set(v string) error {
	for _, a := range c.allowed {
		if v == a {
			*c.p = a
			return nil
		}
	}
	return fmt.Errorf("want one of %s", strings.Join(c.allowed, ", "))
}

func (c *choice) Get() any { return *c.p }

// EnvDuration reads a duration that only the environment sets, as strictly
// as Load reads the flags; unset is 0.
func EnvDuration(lookup func(string) (string, bool), name string) (time.Duration, error) {
	v, ok := lookup(name)
	if !ok || strings.TrimSpace(v) == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration with a unit, such as 90s, 30m or 24h", name, v)
	}
	return d, nil
}

// commandLineError is an error the flag set has already printed, with its
// usage.
type commandLineError struct{ error }

func (e commandLineError) Unwrap() error { return e.error }

// Printed reports whether the flag set printed err already.
func Printed(err error) bool {
	var c commandLineError
	return errors.As(err, &c)
}
