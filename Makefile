# Development tasks. Everything that needs PostgreSQL uses $DATABASE_URL when it is
# set and otherwise starts the private dev cluster with scripts/devdb.sh.
#
#   make build      build every binary under cmd/ into bin/
#   make run        run the server against the dev database (dev admin and secret)
#   make test       go vet + all tests against a real PostgreSQL + promtool test rules (docs/ops/alerts.yml);
#                   the browser tests get Chromium (scripts/chromium.sh) and axe-core (scripts/axe.sh)
#   make test-race  the same tests under the race detector (slower)
#   make test-slow  what CI leaves out: test-image, test-kube, test-failover (kill -9 of a
#                   PostgreSQL primary under load, its standby promoted; sync and async)
#   make bench      taskbench lanes: bare SQL vs store vs HTTP vs the batched lane at 1, 16, 64
#                   workers, each round against River's burn-down (scripts/riverbench)
#   make bench-go   Go benchmarks of the store hot paths (go test -bench)
#   make bench-wake a new task's way to a long-polling worker (p50/p99): same instance and through NOTIFY
#   make bench-worker  task-worker's own overhead per task with a no-op command
#   make bench-schedules  the scheduler with 10,000 schedules: CPU idle and per firing, firing delay
#   make bench-login   server CPU of 10,000 wrong passwords from one address, throttled vs not
#   make bench-scale   every admin and worker read at 10k, 100k and 1M tasks of history (p50/p99)
#   make lint       gofmt check + go vet
#   make lint-openapi  Redocly lint of the OpenAPI document (installs Redocly CLI into ~/.cache)
#   make fuzz       fuzz the API's request decoding for FUZZTIME (default 30s)
#   make fuzz-contract  requests drawn from the OpenAPI document for every operation, as admin and
#                   worker, against a real server: CONTRACT_FUZZ_CHECKS (default 200) per operation and role
#   make screenshots  regenerate docs/ui/*.png: every admin UI page in a headless Chromium
#   make bench-ui   server time of every admin UI page, p50/p99, against DATABASE_URL
#   make soak       SOAK_DURATION (default 30m) of claim-and-complete load on three instances and a
#                   private PostgreSQL, with kill -9, PostgreSQL restarts and hostile inputs on a loop;
#                   then counts, taskctl replay --verify and resident memory (prints a summary)
#   make devdb      start the dev cluster and print its URL
#   make devdb-stop stop it

GO        ?= go
TESTFLAGS ?=
# go test's default 10 minutes per package is too tight for cmd/task-service's
# through-the-binary tests on a loaded 2-core machine; CI takes a few minutes in all.
TESTTIMEOUT ?= 20m
# No larger -parallel: a cmd/task-service cluster under load opens up to ~125 connections
# (three instances, DB_MAX_CONNS=40), and more of them at once, next to another package's
# tests, run out of the test PostgreSQL's max_connections=300 (scripts/devdb.sh).
BENCHTIME ?= 1s

# Development defaults for `make run`; override them in the environment.
ADMIN_EMAIL    ?= admin@example.com
ADMIN_PASSWORD ?= admin-dev-password
JWT_SECRET     ?= dev-only-jwt-secret-change-me-0123456789

# Shell snippet: export TEST_DATABASE_URL, from DATABASE_URL or the dev cluster.
TEST_DB_ENV = \
	if [ -z "$${TEST_DATABASE_URL:-}" ]; then \
		if [ -n "$${DATABASE_URL:-}" ]; then TEST_DATABASE_URL="$$DATABASE_URL"; \
		else TEST_DATABASE_URL="$$(scripts/devdb.sh)"; fi; \
	fi; \
	export TEST_DATABASE_URL

# Shell snippet: export PROMTOOL (scripts/promtool.sh installs Debian's prometheus
# package when promtool is missing) and make the Go tests that run
# `promtool check metrics` on a scrape and check the dashboard's PromQL require it.
PROMTOOL_ENV = PROMTOOL="$$(scripts/promtool.sh)"; export PROMTOOL; export REQUIRE_PROMTOOL=1

.PHONY: bench-schedules
.PHONY: bench-login bench-compaction
.PHONY: image test-image test-kube test-failover test-pg-move test-slow
.PHONY: build run test test-race bench bench-go bench-worker bench-scale lint lint-openapi fuzz fuzz-contract devdb devdb-stop screenshots bench-ui

build:
	$(GO) build -buildvcs=auto -o bin/ ./cmd/... # stamps the git revision `version` prints, even where GOFLAGS turns it off

run: build
	@set -e; \
	if [ -z "$${DATABASE_URL:-}" ]; then DATABASE_URL="$$(scripts/devdb.sh)"; fi; \
	export DATABASE_URL; \
	export ADMIN_EMAIL='$(ADMIN_EMAIL)' ADMIN_PASSWORD='$(ADMIN_PASSWORD)' JWT_SECRET='$(JWT_SECRET)'; \
	LISTEN_ADDR="$${LISTEN_ADDR:-:8001}"; export LISTEN_ADDR; \
	echo "task-service: admin UI http://127.0.0.1:$${LISTEN_ADDR##*:}/  (log in as $$ADMIN_EMAIL / $$ADMIN_PASSWORD)"; \
	echo "task-service: API http://127.0.0.1:$${LISTEN_ADDR##*:}/api/v1"; \
	echo "task-service: log in as $$ADMIN_EMAIL / $$ADMIN_PASSWORD (created if no admin exists yet)"; \
	echo "task-service: database $$DATABASE_URL"; \
	if [ -z "$${DATA_S3_BUCKET:-}" ]; then DATA_DIR="$${DATA_DIR:-.data/task-data}"; export DATA_DIR; \
		echo "task-service: task data in $$DATA_DIR"; fi; \
	exec bin/task-service serve

# The container image (podman, FROM scratch; scripts/image.sh installs podman when
# missing). IMAGE names the tag.
IMAGE ?= task-service:dev
image:
	@scripts/image.sh '$(IMAGE)' >/dev/null

# Runs the built image against the test PostgreSQL: migrate, /readyz, SIGTERM drain.
test-image: image
	@set -e; $(TEST_DB_ENV); \
	TASK_SERVICE_IMAGE='$(IMAGE)' $(GO) test -count=1 -run '^TestImage$$' -v ./cmd/task-service

# Renders docs/kubernetes with kustomize and decodes every object strictly into the
# Kubernetes API types (scripts/kubecheck, its own module: the types stay out of go.mod).
test-kube:
	cd scripts/kubecheck && $(GO) test -count=1 ./...

# The failover under load (cmd/task-service/failover_load_test.go): a private
# primary and standby, three instances, a task-worker fleet, kill -9 and promote;
# synchronous then asynchronous replication, a few minutes each. TEST_SLOW turns
# the tests on (they skip without it).
test-failover:
	@set -e; $(TEST_DB_ENV); \
	TEST_SLOW=1 $(GO) test -count=1 -timeout $(TESTTIMEOUT) -run '^TestFailoverUnderLoad' -v ./cmd/task-service

# The database moved under the service to a new cluster, with pg_upgrade
# (scripts/pg-upgrade.sh) and with a logical dump and restore: private clusters and
# service restarts, a few minutes (docs/deploy.md, "Upgrading PostgreSQL").
test-pg-move:
	@set -e; $(TEST_DB_ENV); \
	TEST_SLOW=1 $(GO) test -count=1 -timeout $(TESTTIMEOUT) -run '^(TestPgUpgradeKeepsPositions|TestLogicalRestoreIsRefusedUntilTheCounterMoves)$$' -v ./cmd/task-service

# What CI's 20-minute limit leaves out (README, "Development").
test-slow: test-image test-kube test-failover test-pg-move

# The admin UI's browser tests drive a headless Chromium: scripts/chromium.sh
# installs Debian's chromium when it is missing and prints its path.
CHROMIUM_ENV = CHROMIUM="$${CHROMIUM:-$$(scripts/chromium.sh)}"; export CHROMIUM

# The accessibility test (TestBrowserAccessibility) runs axe-core in that Chromium:
# scripts/axe.sh installs it from npm into ~/.cache and prints the path. Without it
# the test skips, except under CI=true, where make test stops here.
AXE_ENV = if AXE_JS="$$(scripts/axe.sh)"; then export AXE_JS; \
	elif [ "$${CI:-}" = true ]; then exit 1; \
	else echo "make test: no axe-core (scripts/axe.sh failed): TestBrowserAccessibility will skip" >&2; fi

test:
	@set -e; $(TEST_DB_ENV); $(CHROMIUM_ENV); $(AXE_ENV); $(PROMTOOL_ENV); \
	echo "go vet ./..."; $(GO) vet ./...; \
	echo "promtool test rules docs/ops/alerts_test.yml"; "$$PROMTOOL" test rules docs/ops/alerts_test.yml; \
	echo "go test -count=1 -timeout $(TESTTIMEOUT) $(TESTFLAGS) ./...  (TEST_DATABASE_URL=$$TEST_DATABASE_URL)"; \
	$(GO) test -count=1 -timeout $(TESTTIMEOUT) $(TESTFLAGS) ./...

test-race:
	@set -e; $(TEST_DB_ENV); $(CHROMIUM_ENV); $(AXE_ENV); \
	echo "go test -race -count=1 $(TESTFLAGS) ./...  (TEST_DATABASE_URL=$$TEST_DATABASE_URL)"; \
	$(GO) test -race -count=1 -timeout 30m $(TESTFLAGS) ./...

# The throughput benchmark of issue 2, in a scratch database (taskservice_bench)
# on the server of DATABASE_URL or the dev cluster. Extra flags in BENCHFLAGS,
# e.g. make bench BENCHFLAGS='--workers 64 --modes bare,http --json'.
BENCHFLAGS ?=
bench:
	@set -e; \
	if [ -z "$${DATABASE_URL:-}" ]; then DATABASE_URL="$$(scripts/devdb.sh)"; fi; \
	export DATABASE_URL; \
	$(GO) build -o bin/ ./cmd/taskbench; \
	echo "building scripts/riverbench (River, the peer; its own Go module)" >&2; \
	(cd scripts/riverbench && $(GO) build -o ../../bin/riverbench .); \
	echo "bin/taskbench lanes --river bin/riverbench $(BENCHFLAGS)" >&2; \
	bin/taskbench lanes --river bin/riverbench $(BENCHFLAGS)

# Issue 16's latency (README, "The batched lane against River"): how long a new task
# takes to reach a long-polling worker, on the instance it was created on and through
# NOTIFY from another, with the lane otherwise idle; two task-service processes
# (bin/task-service) on a scratch database (taskservice_bench_wake). Extra flags in WAKEFLAGS, e.g. WAKEFLAGS='--workers 64 --json'.
WAKEFLAGS ?=
.PHONY: bench-wake
bench-wake:
	@set -e; \
	if [ -z "$${DATABASE_URL:-}" ]; then DATABASE_URL="$$(scripts/devdb.sh)"; fi; \
	export DATABASE_URL; \
	$(GO) build -o bin/ ./cmd/taskbench ./cmd/task-service; \
	echo "bin/taskbench wake $(WAKEFLAGS)" >&2; \
	bin/taskbench wake $(WAKEFLAGS)

bench-go:
	@set -e; $(TEST_DB_ENV); \
	$(GO) test -run '^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) -count=1 -timeout 30m $(TESTFLAGS) ./store/...

# The worker loop's overhead per task (claim -> start, exit -> completed), p50/p99,
# over WORKER_BENCH_TASKS tasks of `true` (docs/examples/README.md).
WORKER_BENCH_TASKS ?= 1000
bench-worker:
	@set -e; $(TEST_DB_ENV); \
	TASK_WORKER_BENCH=1 TASK_WORKER_BENCH_TASKS=$(WORKER_BENCH_TASKS) \
	$(GO) test -count=1 -run '^TestLoopOverhead$$' -v ./cmd/task-worker

# Login throttling (issue 11, ADR 011): the real binary at BCRYPT_COST=10 takes 10,000
# wrong passwords from one address with the default throttle, then LOGIN_BENCH_UNTHROTTLED
# (500) with the throttle off, scaled to 10,000; prints the server's CPU for each. The
# unthrottled part takes minutes on a loaded 2-core machine.
LOGIN_BENCH_UNTHROTTLED ?= 500
bench-login:
	@set -e; $(TEST_DB_ENV); \
	LOGIN_BENCH=1 LOGIN_BENCH_UNTHROTTLED=$(LOGIN_BENCH_UNTHROTTLED) \
	$(GO) test -count=1 -timeout 30m -run '^TestLoginThrottleCPU$$' -v ./cmd/task-service

# The scheduler (issue 13, ADR 013): SCHEDULE_BENCH_SCHEDULES active schedules firing once a
# minute each; CPU of this process and of PostgreSQL when idle and per firing; the firing
# delay p50/p99. About two minutes.
SCHEDULE_BENCH_SCHEDULES ?= 10000
bench-schedules:
	@set -e; $(TEST_DB_ENV); \
	SCHEDULE_BENCH=1 SCHEDULE_BENCH_SCHEDULES=$(SCHEDULE_BENCH_SCHEDULES) \
	$(GO) test -count=1 -timeout 15m -run '^TestSchedulerBenchmark$$' -v ./reactors

# Issue 10's scale benchmark (README, "Costs that stay flat"): builds databases of
# SCALE_SIZES tasks from synthetic events once (taskservice_scale_<size> on the server of
# DATABASE_URL or the dev cluster; later runs reuse them), then times every admin and
# worker read SCALE_CALLS times each. The first 1m build takes about a quarter of an hour.
SCALE_SIZES ?= 10k,100k,1m
SCALE_CALLS ?= 60
# SCALE_PROFILE=busy: the same history in the last hour (taskservice_scale_busy_<size>).
SCALE_PROFILE ?= spread
bench-scale:
	@set -e; \
	if [ -z "$${DATABASE_URL:-}" ]; then DATABASE_URL="$$(scripts/devdb.sh)"; fi; \
	export DATABASE_URL; \
	$(GO) build -o bin/ ./cmd/taskbench; \
	echo "bin/taskbench scale --sizes $(SCALE_SIZES) --calls $(SCALE_CALLS) --profile $(SCALE_PROFILE)" >&2; \
	bin/taskbench scale --sizes $(SCALE_SIZES) --calls $(SCALE_CALLS) --profile $(SCALE_PROFILE)

# Reads while the event log is compacted (issue 28, ADRs 035 and 036): the 1M database
# of bench-scale, archived, then compacted by task-service beside a store+create lane of
# LANE_WORKERS workers (default 16), with taskbench scale before and during
# (scripts/bench-compaction.sh; about eight minutes once the database exists).
bench-compaction:
	@set -e; \
	if [ -z "$${DATABASE_URL:-}" ]; then DATABASE_URL="$$(scripts/devdb.sh)"; fi; \
	export DATABASE_URL; \
	$(GO) build -o bin/ ./cmd/taskbench ./cmd/task-service; \
	scripts/bench-compaction.sh

lint:
	@set -e; \
	unformatted="$$(gofmt -l $$($(GO) list -e -f '{{.Dir}}' ./...))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi; \
	$(GO) vet ./...

# The OpenAPI document against Redocly's recommended rules: zero errors.
lint-openapi:
	@scripts/redocly.sh

# The seed corpus of FuzzDecode runs in `make test`; this explores beyond it.
FUZZTIME ?= 30s
fuzz:
	$(GO) test ./api -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME)

# TestContractFuzz runs 4 requests per operation and role in `make test`; this
# runs many more (rapid's seed: CONTRACT_FUZZ_SEED, default 1) and prints the
# failure classes and known mismatches (ADR 029).
CONTRACT_FUZZ_CHECKS ?= 200
CONTRACT_FUZZ_SEED ?= 1
fuzz-contract:
	@set -e; $(TEST_DB_ENV); \
	CONTRACT_FUZZ_CHECKS=$(CONTRACT_FUZZ_CHECKS) CONTRACT_FUZZ_SEED=$(CONTRACT_FUZZ_SEED) \
	$(GO) test -count=1 -timeout 60m -v -run '^TestContractFuzz$$' ./api | grep -E 'contract fuzz|failure class|known mismatch|e\.g\.|^(ok|FAIL|---)'

devdb:
	@scripts/devdb.sh start

devdb-stop:
	@scripts/devdb.sh stop

# Screenshots of every admin UI page (light, dark, phone width) into docs/ui/,
# taken in a headless Chromium from a seeded scratch database.
screenshots:
	@set -e; $(TEST_DB_ENV); $(CHROMIUM_ENV); \
	UI_SCREENSHOTS="$$(pwd)/docs/ui" $(GO) test -count=1 -run '^TestScreenshots$$' ./cmd/task-service; \
	ls docs/ui

# Server time of every admin UI page (p50/p99, in process) against one or more
# databases, side by side: UI_BENCH_DATABASE_URL=url1,url2 (default: the
# taskservice_scale_* databases of make bench-scale on the dev cluster).
UI_BENCH_CALLS ?= 30
bench-ui:
	@set -e; \
	if [ -z "$${UI_BENCH_DATABASE_URL:-}" ]; then \
		base="$${DATABASE_URL:-$$(scripts/devdb.sh)}"; base="$${base%%\?*}"; base="$${base%/*}"; \
		UI_BENCH_DATABASE_URL="$$base/taskservice_scale_10k?sslmode=disable,$$base/taskservice_scale_100k?sslmode=disable,$$base/taskservice_scale_1m?sslmode=disable"; \
	fi; \
	echo "UI_BENCH_DATABASE_URL=$$UI_BENCH_DATABASE_URL" >&2; \
	UI_BENCH_DATABASE_URL="$$UI_BENCH_DATABASE_URL" UI_BENCH_CALLS=$(UI_BENCH_CALLS) \
	$(GO) test -count=1 -timeout 60m -run '^TestPageTimes$$' -v ./api/ui | grep -v '^=== RUN'

# Task data (issue 14): a DATA_BENCH_BYTES upload (default 2 GiB) through the real
# task-service on the filesystem and on S3 (versitygw), the service's RSS sampled
# all along, next to cp and to the same client's direct upload; prints MB/s and
# the memory growth (which must stay under 64 MB).
DATA_BENCH_BYTES ?= 2147483648
.PHONY: bench-data s3dev
bench-data:
	@set -e; $(TEST_DB_ENV); \
	DATA_BENCH=1 DATA_BENCH_BYTES=$(DATA_BENCH_BYTES) \
	$(GO) test -count=1 -timeout 30m -run '^TestUploadMemoryAndThroughput$$' -v ./cmd/task-service

# A local S3-compatible server (versitygw) for trying DATA_S3_BUCKET by hand;
# prints the settings to export. The tests start their own.
s3dev:
	@scripts/s3dev.sh start

# The soak run (issue 20, README "The soak run"): TestSoak in cmd/task-service starts its own
# PostgreSQL 15 cluster (initdb in a temporary directory, a free port, run as the postgres
# user when root; never the dev cluster) and three task-service instances on it; SOAK_WORKERS
# workers (16) claim and complete tasks as fast as they go while an instance is killed with
# SIGKILL, PostgreSQL restarts fast and immediately, and a transaction is held open, one fault
# every SOAK_FAULT_EVERY (15s), and the hostile inputs of issue 20 come every half second.
# SOAK_RATE caps task creation per second (0: as fast as the workers take them).
SOAK_DURATION ?= 30m
.PHONY: soak
soak:
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./cmd/task-service
