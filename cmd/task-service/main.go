// Command task-service is the server: the REST API, and (with the reactors
// work) the reactors and the stuck detector.
//
//	task-service [serve]          run the server (migrates first)
//	task-service migrate up       apply migrations
//	task-service migrate down [N] revert N migrations (all without N)
//	task-service migrate version  print the applied version
//	task-service openapi          print the OpenAPI document (JSON)
//	task-service version          print the version and VCS revision
//
// Configuration comes from the environment; each variable has a flag twin.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/crypto/bcrypt"

	"github.com/clawdbot/task-service/api"
	"github.com/clawdbot/task-service/api/ui"
	"github.com/clawdbot/task-service/cmd/internal/logs"
	"github.com/clawdbot/task-service/cmd/internal/settings"
	"github.com/clawdbot/task-service/cmd/internal/version"
	"github.com/clawdbot/task-service/events"
	"github.com/clawdbot/task-service/migrations"
	"github.com/clawdbot/task-service/projections"
	"github.com/clawdbot/task-service/store"
)

type config struct {
	databaseURL   string
	listenAddr    string
	jwtSecret     string
	adminEmail    string
	adminPassword string
	logLevel      string
	logFormat     string
	tokenTTL      time.Duration
	bcryptCost    int
	maxConns      int
	bg            backgroundConfig
	edge          edgeConfig
	data          dataConfig
	usage         usageConfig
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cmd := "serve"
	switch {
	case len(args) > 0 && (args[0] == "--version" || args[0] == "-version"):
		cmd, args = "version", args[1:]
	case len(args) > 0 && !strings.HasPrefix(args[0], "-"):
		cmd, args = args[0], args[1:]
	}
	cfg := config{}
	fs := flagSet("task-service "+cmd, &cfg)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageCommands)
		fmt.Fprintf(fs.Output(), "\nFlags of serve and migrate (each has an environment twin):\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nExample:\n  DATABASE_URL=postgres://localhost/taskservice JWT_SECRET=$(openssl rand -hex 32) \\\n    ADMIN_EMAIL=admin@example.com ADMIN_PASSWORD=change-me task-service serve\n")
	}
	switch cmd {
	case "serve", "migrate":
	case "help":
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return 0
	case "version":
		fmt.Print("task-service " + version.Read().String())
		return 0
	case "openapi":
		doc, err := api.Document()
		if err != nil {
			fmt.Fprintf(os.Stderr, "task-service openapi: %v\n", err)
			return 1
		}
		fmt.Println(string(doc))
		return 0
	default:
		fmt.Fprintf(os.Stderr, "task-service: unknown command %q\n\n", cmd)
		fs.Usage()
		return 2
	}
	if err := loadSettings(fs, &cfg, args, os.LookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if !settings.Printed(err) {
			fmt.Fprintf(os.Stderr, "task-service: %v\n(see task-service --help)\n", err)
		}
		return 2
	}
	log := logs.New(cfg.logLevel, cfg.logFormat)
	if cfg.databaseURL == "" {
		log.Error().Msg("DATABASE_URL is not set: point it at PostgreSQL, or use `make run`, which starts a private one")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	var err error
	if cmd == "migrate" {
		err = migrate(ctx, cfg, fs.Args())
	} else {
		err = serve(ctx, cfg, log)
	}
	if err != nil {
		log.Error().Err(err).Msg(cmd + " failed")
		return 1
	}
	return 0
}

// flagSet is every setting of serve and migrate: the one table of flags
// and their environment twins (settings.Load).
func flagSet(name string, c *config) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL URL (env DATABASE_URL)")
	fs.StringVar(&c.listenAddr, "listen-addr", ":8001", "HTTP listen address (env LISTEN_ADDR)")
	fs.StringVar(&c.jwtSecret, "jwt-secret", "", "HS256 secret for tokens, at least 16 bytes (env JWT_SECRET)")
	fs.StringVar(&c.adminEmail, "admin-email", "", "create this admin at start if no admin exists (env ADMIN_EMAIL)")
	fs.StringVar(&c.adminPassword, "admin-password", "", "password of that admin (env ADMIN_PASSWORD)")
	settings.Choice(fs, &c.logLevel, "log-level", "info", []string{"debug", "info", "warn", "error"}, "debug, info, warn or error (env LOG_LEVEL)")
	settings.Choice(fs, &c.logFormat, "log-format", "auto", []string{"json", "console", "auto"}, "json, console or auto (console on a terminal) (env LOG_FORMAT)")
	fs.DurationVar(&c.tokenTTL, "token-ttl", 24*time.Hour, "how long a login token lasts (env TOKEN_TTL)")
	fs.IntVar(&c.bcryptCost, "bcrypt-cost", 10, "bcrypt cost for new passwords (env BCRYPT_COST)")
	fs.IntVar(&c.maxConns, "max-conns", 40, "database pool size (env DB_MAX_CONNS)")
	c.bg.register(fs)
	c.edge.register(fs)
	c.data.register(fs)
	c.usage.register(fs)
	return fs
}

// loadSettings fills cfg from the environment and args, refusing what does
// not parse or makes no sense, before anything starts.
func loadSettings(fs *flag.FlagSet, cfg *config, args []string, lookup func(string) (string, bool)) error {
	if err := settings.Load(fs, args, lookup); err != nil {
		return err
	}
	if cfg.bcryptCost < bcrypt.MinCost || cfg.bcryptCost > bcrypt.MaxCost {
		return fmt.Errorf("BCRYPT_COST=%d: want a whole number from %d to %d", cfg.bcryptCost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	if cfg.maxConns < 1 {
		return fmt.Errorf("DB_MAX_CONNS=%d: want at least 1", cfg.maxConns)
	}
	if cfg.tokenTTL < time.Second {
		return fmt.Errorf("TOKEN_TTL=%s: want a duration of at least 1s, such as 24h", cfg.tokenTTL)
	}
	if err := cfg.bg.checkScheduleHistory(); err != nil {
		return err
	}
	if err := cfg.bg.checkCompaction(); err != nil {
		return err
	}
	return cfg.bg.readTestKnobs(lookup)
}

const usageCommands = `Usage: task-service [COMMAND] [flags]

Commands:
  serve             run the server: API, admin UI, reactors (the default; migrates first)
  migrate up        apply the database migrations
  migrate down [N]  revert N migrations (all without N)
  migrate version   print the applied migration version
  openapi           print the OpenAPI document (JSON), for client generators
  version           print the version and VCS revision of this binary
  help              print this help
`

func migrate(ctx context.Context, cfg config, args []string) error {
	if len(args) == 0 {
		return errors.New("say `migrate up`, `migrate down [N]` or `migrate version`")
	}
	switch args[0] {
	case "up":
		return migrations.Up(ctx, cfg.databaseURL)
	case "down":
		steps := 0
		if len(args) > 1 {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return fmt.Errorf("migrate down takes a positive number of steps, not %q", args[1])
			}
			steps = n
		}
		return migrations.Down(ctx, cfg.databaseURL, steps)
	case "version":
		v, dirty, err := migrations.Version(ctx, cfg.databaseURL)
		if err != nil {
			return err
		}
		fmt.Printf("version %d dirty=%v\n", v, dirty)
		return nil
	}
	return fmt.Errorf("unknown migrate command %q: say up, down or version", args[0])
}

func serve(ctx context.Context, cfg config, log zerolog.Logger) error {
	if len(cfg.jwtSecret) < 16 {
		return errors.New("JWT_SECRET must be set to at least 16 bytes (for example: openssl rand -hex 32)")
	}
	// Settings first: a mistake stops the start before the database is touched.
	proxies, err := cfg.edge.proxies()
	if err != nil {
		return err
	}
	origins, err := cfg.edge.origins()
	if err != nil {
		return err
	}
	cookieSecure, err := cfg.edge.secureCookie()
	if err != nil {
		return err
	}
	hsts, err := cfg.edge.hsts()
	if err != nil {
		return err
	}
	tgCommands, err := cfg.bg.telegram.commandsConfig()
	if err != nil {
		return err
	}
	prices, err := cfg.usage.pricesTable()
	if err != nil {
		return err
	}
	day, err := cfg.usage.teamDay()
	if err != nil {
		return err
	}
	digestSchedule, err := cfg.bg.digest.schedule(day.Loc)
	if err != nil {
		return err
	}
	if err := migrations.Up(ctx, cfg.databaseURL); err != nil {
		var newer migrations.NewerSchemaError
		if !errors.As(err, &newer) {
			return err
		}
		// A rollback to this release: it runs on the next release's schema.
		log.Warn().Uint("schema", newer.Database).Uint("binary_schema", newer.Binary).
			Msg("the database schema is newer than this binary's; running on it without migrating (a rollback)")
	}
	pool, err := store.Connect(ctx, cfg.databaseURL, int32(cfg.maxConns))
	if err != nil {
		return err
	}
	defer pool.Close()
	// Before anything appends: after a logical restore, new events would
	// sort below the restored ones, where no consumer looks.
	if err := store.CheckCounter(ctx, pool); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	bg, err := newBackground(cfg, pool, reg, log)
	if err != nil {
		return err
	}
	db, err := store.New(pool, store.Config{Projector: projections.Projector{},
		AfterCommit: bg.notifier.Committed, Notifier: bg.notifier, AfterUnblock: bg.hub.Unblocked, OfflineAfter: cfg.bg.offlineAfter,
		ScheduleMinInterval: cfg.bg.scheduleMinInterval, FreshnessMinAge: cfg.bg.freshnessMinAge, Registerer: reg, Prices: prices, Day: day})
	if err != nil {
		return err
	}
	// Events are stamped by this machine's clock: refuse to write them with
	// one far from the others' (/readyz keeps checking it).
	if err := db.CheckClock(ctx); err != nil {
		return err
	}
	bs, err := openData(ctx, cfg.data, log)
	if err != nil {
		return err
	}
	build := version.Read()
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskservice_build_info",
		Help: "Always 1: the running build's version, VCS revision and Go version as labels."},
		[]string{"version", "revision", "goversion"})
	buildInfo.WithLabelValues(build.Version, build.Revision, build.GoVersion).Set(1)
	reg.MustRegister(buildInfo)
	warnOfflineThreshold(cfg.bg.offlineAfter, log)
	tgCommands.OnReply = bg.pokeTelegram
	srv, err := api.New(api.Config{DB: db, Logger: log, JWTSecret: []byte(cfg.jwtSecret),
		TokenTTL: cfg.tokenTTL, BcryptCost: cfg.bcryptCost, Registry: reg, Hub: bg.hub,
		Ready: func(context.Context) error { return bg.listener.Ready() },
		Login: cfg.edge.login, TrustedProxies: proxies, CORSOrigins: origins,
		CookieSecure: cookieSecure, HSTSMaxAge: hsts, BodyReadTimeout: cfg.edge.bodyTimeout, Digest: digestSchedule,
		Data: api.DataConfig{Store: bs, MaxFileBytes: cfg.data.maxFileBytes, MaxTaskBytes: cfg.data.maxTaskBytes,
			MaxTaskFiles: cfg.data.maxTaskFiles, URLTTL: cfg.data.urlTTL},
		Telegram: tgCommands})
	if err != nil {
		return err
	}
	// The admin web UI at / (ADR 009).
	pages, err := ui.New(ui.Config{API: srv, DB: db, Logger: log, Secret: []byte(cfg.jwtSecret)})
	if err != nil {
		return err
	}
	pages.Register(srv.Echo())

	bg.data = bs
	if err := bg.addWorkers(cfg, db, reg, log); err != nil {
		return err
	}
	// Telegram commands without a public URL: getUpdates (ADR 022).
	poller, err := cfg.bg.telegram.poller(srv, cfg.databaseURL, bg.instanceID, log)
	if err != nil {
		return err
	}
	if poller != nil {
		bg.workers = append(bg.workers, poller.Run)
	}
	bg.start(ctx, log)
	defer bg.stop()
	sweep := startSweeper(ctx, cfg.data, db, bs, log)
	defer sweep.stop()
	if err := bootstrapAdmin(ctx, db, srv, cfg, log); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.listenAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (set LISTEN_ADDR to a free address)", cfg.listenAddr, err)
	}
	// Timeouts (ADR 011): headers within 10 s; a body within
	// HTTP_BODY_TIMEOUT (set per request, so a long-poll is not cut);
	// answers within the write timeout, which the event stream extends on
	// each write; idle keep-alives closed after the idle timeout.
	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout: cfg.edge.writeTimeout, IdleTimeout: cfg.edge.idleTimeout}
	log.Info().Str("version", build.Short()).Str("addr", ln.Addr().String()).Str("api", "http://"+displayAddr(ln.Addr())+"/api/v1").Str("ui", "http://"+displayAddr(ln.Addr())+"/").Msg("task-service listening")

	// The live tail's broadcaster: its own context, ended before Shutdown so
	// open event streams close cleanly instead of holding Shutdown up.
	tailCtx, stopTail := context.WithCancel(context.WithoutCancel(ctx))
	defer stopTail()
	tailDone := make(chan struct{})
	go func() {
		defer close(tailDone)
		if err := srv.Run(tailCtx); err != nil {
			log.Error().Err(err).Msg("event stream broadcaster stopped")
		}
	}()

	errc := make(chan error, 1)
	go func() { errc <- httpSrv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info().Msg("shutting down: finishing requests in flight (30 s at most)")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Order: answer waiting long-polls and stop taking requests; then the
	// reactors and the stuck detector finish their batch; then the NOTIFY
	// sender and the listener (bg.stop).
	srv.Drain()
	stopTail()
	<-tailDone
	if err := httpSrv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	bg.stop()
	log.Info().Msg("stopped")
	return nil
}

// bootstrapAdmin creates the first admin from ADMIN_EMAIL/ADMIN_PASSWORD.
func bootstrapAdmin(ctx context.Context, db *store.DB, srv *api.Server, cfg config, log zerolog.Logger) error {
	exists, err := db.AdminExists(ctx)
	if err != nil || exists {
		return err
	}
	if cfg.adminEmail == "" || cfg.adminPassword == "" {
		log.Warn().Msg("no admin exists: set ADMIN_EMAIL and ADMIN_PASSWORD and restart to create one")
		return nil
	}
	hash, err := srv.HashPassword(cfg.adminPassword)
	if err != nil {
		return err
	}
	_, err = db.CreateUser(ctx, events.UserRegistered{Email: cfg.adminEmail, FullName: "Administrator", IsAdmin: true},
		cfg.adminPassword, hash, events.Meta{Actor: events.System("bootstrap")})
	if errors.Is(err, events.ErrConflict) {
		return nil // another instance created it first
	}
	if err != nil {
		return fmt.Errorf("create admin %s: %w", cfg.adminEmail, err)
	}
	log.Info().Str("email", cfg.adminEmail).Msg("created the first admin")
	return nil
}

func displayAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if ok && tcp.IP.IsUnspecified() {
		return fmt.Sprintf("127.0.0.1:%d", tcp.Port)
	}
	return a.String()
}
