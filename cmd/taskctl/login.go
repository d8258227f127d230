package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/clawdbot/task-service/api/client"
)

var loginSpec = cmdSpec{
	name: "login", args: "--email EMAIL [--password PASSWORD] [--api URL]",
	summary: "Log in and keep the token for the next commands, in $XDG_CONFIG_HOME/taskctl/config.json (mode 0600),\n" +
		"one login per API address. The password comes from --password, then $TASKCTL_PASSWORD, then a prompt\n" +
		"(or one line of standard input when it is not a terminal).",
	example: "taskctl login --email admin@example.com --api http://127.0.0.1:8001",
}

func (a *app) login(args []string) int {
	fs := flagSet(loginSpec)
	email := fs.String("email", a.getenv("TASKCTL_EMAIL"), "your email (default $TASKCTL_EMAIL)")
	password := fs.String("password", "", "your password (default $TASKCTL_PASSWORD, else asked)")
	api := apiFlag(fs)
	_, code, ok := a.parseArgs(fs, loginSpec, args, 0, "")
	if !ok {
		return code
	}
	if strings.TrimSpace(*email) == "" {
		return a.fail("login", usagef("--email is required"))
	}
	cfg, err := a.loadConfig()
	if err != nil {
		return a.fail("login", err)
	}
	addr := a.apiAddr(*api, cfg)
	pw := *password
	if pw == "" {
		pw = a.getenv("TASKCTL_PASSWORD")
	}
	if pw == "" {
		if pw, err = a.readPassword(fmt.Sprintf("Password for %s at %s: ", *email, addr)); err != nil {
			return a.fail("login", err)
		}
	}
	ctx, cancel := a.signalContext()
	defer cancel()
	c := client.New(addr, a.httpClient)
	resp, err := c.Login(ctx, *email, pw)
	if client.IsStatus(err, 401) {
		fmt.Fprintf(a.stderr, "taskctl login: wrong email or password for %s\n", addr)
		return exitAuth
	}
	if err != nil {
		return a.fail("login", err)
	}
	s := session{Token: resp.Token, Email: *email, ExpiresAt: resp.ExpiresAt}
	roles := []string{}
	if resp.User != nil {
		s.Name = resp.User.FullName
		if resp.User.IsAdmin {
			roles = append(roles, "admin")
		}
		if resp.User.IsWorker {
			roles = append(roles, "worker")
		}
	}
	cfg.API = addr
	cfg.Sessions[addr] = s
	path, err := a.saveConfig(cfg)
	if err != nil {
		return a.fail("login", err)
	}
	fmt.Fprintf(a.stdout, "Logged in to %s as %s <%s> (%s) until %s.\nToken kept in %s.\n",
		addr, orDash(s.Name), *email, strings.Join(roles, ", "), fmtTime(resp.ExpiresAt), path)
	return exitOK
}

// readPassword asks on the terminal without echo, or reads one line of a
// piped standard input.
func (a *app) readPassword(prompt string) (string, error) {
	if f, ok := a.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(a.stderr, prompt)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.stderr)
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		return string(b), nil
	}
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", usagef("no password: give --password, set TASKCTL_PASSWORD or run in a terminal to be asked (%v)", err)
	}
	return line, nil
}

var logoutSpec = cmdSpec{
	name: "logout", args: "[--api URL]",
	summary: "Forget the login kept for an API address.",
	example: "taskctl logout",
}

func (a *app) logout(args []string) int {
	fs := flagSet(logoutSpec)
	api := apiFlag(fs)
	_, code, ok := a.parseArgs(fs, logoutSpec, args, 0, "")
	if !ok {
		return code
	}
	cfg, err := a.loadConfig()
	if err != nil {
		return a.fail("logout", err)
	}
	addr := a.apiAddr(*api, cfg)
	if _, ok := cfg.Sessions[addr]; !ok {
		fmt.Fprintf(a.stdout, "Not logged in to %s.\n", addr)
		return exitOK
	}
	delete(cfg.Sessions, addr)
	if _, err := a.saveConfig(cfg); err != nil {
		return a.fail("logout", err)
	}
	fmt.Fprintf(a.stdout, "Logged out of %s.\n", addr)
	return exitOK
}
