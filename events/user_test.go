package events_test

import (
	"strings"
	"testing"

	"github.com/clawdbot/task-service/events"
)

func TestRegisterUser(t *testing.T) {
	t.Parallel()
	worker := func(f func(*events.UserRegistered)) events.UserRegistered {
		p := events.UserRegistered{Email: "  Wanda@Example.com ", FullName: " Wanda ", IsWorker: true}
		f(&p)
		return p
	}
	cases := []struct {
		name     string
		p        events.UserRegistered
		password string
		want     outcome
	}{
		{"defaults and normalises", worker(func(*events.UserRegistered) {}), "long-enough",
			ok(events.UserRegistered{Email: "wanda@example.com", FullName: "Wanda", IsWorker: true, MaxConcurrentTasks: 1})},
		{"admin only", worker(func(p *events.UserRegistered) { p.IsWorker, p.IsAdmin = false, true }), "long-enough",
			ok(events.UserRegistered{Email: "wanda@example.com", FullName: "Wanda", IsAdmin: true, MaxConcurrentTasks: 1})},
		{"no email", worker(func(p *events.UserRegistered) { p.Email = " " }), "long-enough", invalid("email")},
		{"not an email", worker(func(p *events.UserRegistered) { p.Email = "Wanda <w@example.com>" }), "long-enough", invalid("email")},
		{"email too long", worker(func(p *events.UserRegistered) { p.Email = strings.Repeat("a", 250) + "@example.com" }), "long-enough", invalid("email")},
		{"no name", worker(func(p *events.UserRegistered) { p.FullName = "" }), "long-enough", invalid("full_name")},
		{"name too long", worker(func(p *events.UserRegistered) { p.FullName = strings.Repeat("n", 201) }), "long-enough", invalid("full_name")},
		{"short password", worker(func(*events.UserRegistered) {}), "short", invalid("password")},
		{"password beyond bcrypt", worker(func(*events.UserRegistered) {}), strings.Repeat("p", 73), invalid("password")},
		{"limit too high", worker(func(p *events.UserRegistered) { p.MaxConcurrentTasks = events.MaxConcurrentLimit + 1 }), "long-enough", invalid("max_concurrent_tasks")},
		{"negative limit", worker(func(p *events.UserRegistered) { p.MaxConcurrentTasks = -1 }), "long-enough", invalid("max_concurrent_tasks")},
		{"no role", worker(func(p *events.UserRegistered) { p.IsWorker = false }), "long-enough", invalid("role")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := events.RegisterUser(c.p, c.password)
			checkOutcome(t, c.want, got, err)
		})
	}
}
