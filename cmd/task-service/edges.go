package main

import (
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/cmd/internal/settings"
)

// edgeConfig is the HTTP edge: login throttling, the client address and
// scheme behind proxies, the session cookie's Secure flag, HSTS, CORS and
// the server's timeouts (ADR 011).
type edgeConfig struct {
	login          api.LoginConfig
	trustedProxies string
	cookieSecure   string
	hstsMaxAge     string
	corsOrigins    string
	bodyTimeout    time.Duration
	writeTimeout   time.Duration
	idleTimeout    time.Duration
}

func (c *edgeConfig) register(fs *flag.FlagSet) {
	fs.IntVar(&c.login.AddressBurst, "login-address-burst", 20, "login attempts one client address may make at once (env LOGIN_ADDRESS_BURST)")
	fs.DurationVar(&c.login.AddressEvery, "login-address-every", 3*time.Second, "then one more attempt per this interval (env LOGIN_ADDRESS_EVERY)")
	fs.IntVar(&c.login.AccountBurst, "login-account-burst", 10, "login attempts for one account at once (env LOGIN_ACCOUNT_BURST)")
	fs.DurationVar(&c.login.AccountEvery, "login-account-every", 30*time.Second, "then one more attempt per this interval (env LOGIN_ACCOUNT_EVERY)")
	fs.IntVar(&c.login.LockoutAfter, "login-lockout-after", 10, "wrong passwords in a row that lock an account (env LOGIN_LOCKOUT_AFTER)")
	fs.DurationVar(&c.login.LockoutBase, "login-lockout", time.Minute, "first lockout; each lockout within a day of the last doubles it (env LOGIN_LOCKOUT)")
	fs.DurationVar(&c.login.LockoutMax, "login-lockout-max", time.Hour, "longest lockout (env LOGIN_LOCKOUT_MAX)")
	fs.StringVar(&c.trustedProxies, "trusted-proxies", "", "comma-separated addresses or CIDRs of proxies whose X-Forwarded-For gives the client address and X-Forwarded-Proto the scheme; empty: the peer is the client (env TRUSTED_PROXIES)")
	settings.Choice(fs, &c.cookieSecure, "cookie-secure", "auto", []string{"auto", "true", "false"}, "mark the session cookie Secure: auto (when the request came over HTTPS, here or at a trusted proxy), true or false (env COOKIE_SECURE)")
	fs.StringVar(&c.hstsMaxAge, "hsts-max-age", "0", "send Strict-Transport-Security with this max-age (e.g. 8760h) on HTTPS requests; 0: none (env HSTS_MAX_AGE)")
	fs.DurationVar(&c.bodyTimeout, "http-body-timeout", api.BodyReadTimeout, "longest time to receive a request body (uploads: without progress) (env HTTP_BODY_TIMEOUT)")
	fs.StringVar(&c.corsOrigins, "cors-allowed-origins", "", "comma-separated origins (https://ui.example.com) that may call the API from a browser; empty: none (env CORS_ALLOWED_ORIGINS)")
	fs.DurationVar(&c.writeTimeout, "http-write-timeout", 90*time.Second, "longest time to answer a request; above the 60 s long-poll (the event stream extends its own) (env HTTP_WRITE_TIMEOUT)")
	fs.DurationVar(&c.idleTimeout, "http-idle-timeout", 2*time.Minute, "how long an idle keep-alive connection stays open (env HTTP_IDLE_TIMEOUT)")
}

// proxies parses TRUSTED_PROXIES: addresses (one host) or CIDRs.
func (c *edgeConfig) proxies() ([]*net.IPNet, error) {
	var out []*net.IPNet
	for _, s := range splitList(c.trustedProxies) {
		if !strings.Contains(s, "/") {
			ip := net.ParseIP(s)
			if ip == nil {
				return nil, fmt.Errorf("TRUSTED_PROXIES: %q is neither an IP address nor a CIDR", s)
			}
			bits := 128
			if ip.To4() != nil {
				ip, bits = ip.To4(), 32
			}
			out = append(out, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
			continue
		}
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			return nil, fmt.Errorf("TRUSTED_PROXIES: %q is neither an IP address nor a CIDR", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// secureCookie parses COOKIE_SECURE strictly: a typo must not quietly
// send the session cookie over plain HTTP.
func (c *edgeConfig) secureCookie() (api.CookieSecure, error) {
	switch v := api.CookieSecure(c.cookieSecure); v {
	case api.CookieSecureAuto, api.CookieSecureAlways, api.CookieSecureNever:
		return v, nil
	}
	return "", fmt.Errorf("COOKIE_SECURE: %q is not auto, true or false", c.cookieSecure)
}

// hsts parses HSTS_MAX_AGE: a duration of whole seconds, 0 for none.
func (c *edgeConfig) hsts() (time.Duration, error) {
	d, err := time.ParseDuration(c.hstsMaxAge)
	if c.hstsMaxAge == "0" {
		d, err = 0, nil
	}
	if err != nil || d < 0 || d%time.Second != 0 {
		return 0, fmt.Errorf("HSTS_MAX_AGE: %q is not a duration of whole seconds like 8760h (a year); 0 sends no HSTS", c.hstsMaxAge)
	}
	return d, nil
}

// origins parses CORS_ALLOWED_ORIGINS.
func (c *edgeConfig) origins() ([]string, error) {
	out := splitList(c.corsOrigins)
	for _, o := range out {
		if o == "*" {
			return nil, fmt.Errorf("CORS_ALLOWED_ORIGINS: list the origins; * would open the API to every site")
		}
		if !strings.HasPrefix(o, "http://") && !strings.HasPrefix(o, "https://") || strings.Count(o, "/") > 2 {
			return nil, fmt.Errorf("CORS_ALLOWED_ORIGINS: %q is no origin; write scheme://host[:port], like https://ui.example.com", o)
		}
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// referenceHeartbeat is how often task-worker heartbeats when idle (its
// heartbeatIdle): a shorter WORKER_OFFLINE_AFTER takes healthy idle workers
// offline between two heartbeats.
const referenceHeartbeat = 30 * time.Second

func warnOfflineThreshold(offlineAfter time.Duration, log zerolog.Logger) {
	if offlineAfter < referenceHeartbeat {
		log.Warn().Dur("worker_offline_after", offlineAfter).Dur("task_worker_heartbeat", referenceHeartbeat).
			Msg("WORKER_OFFLINE_AFTER is shorter than the interval task-worker heartbeats at when idle: healthy idle workers will be marked offline; set it to a few heartbeats (the default is 10m)")
	}
}
