# quorumlock — see README.md.
SHELL := /bin/bash
GO ?= go
PKGS := ./...
# The Redis image the Docker backend of the integration suites runs. No
# registry is needed: `make redis-image` builds it from Debian's redis-server.
# With a registry, run e.g. `make test QUORUMLOCK_REDIS_IMAGE=redis:7.2`.
REDIS_IMAGE ?= quorumlock/redis:local
QUORUMLOCK_REDIS_IMAGE ?= $(REDIS_IMAGE)
export QUORUMLOCK_REDIS_IMAGE

.PHONY: nemesis-semaphore api api-update
.PHONY: all test test-redlock test-durations test-root test-integration test-goredis test-rueidis test-valkey test-otel test-oldest test-sim test-static release-prepare release-check unit short integration sim mutants mutants-sim mutants-clock race lint vet fmt tidy bench bench-peers bench-peers-quick bench-deps demo deps redis-image clean-containers fuzz soak

all: lint test

## deps: install redis-server from Debian's packages when it is missing, and a
##   C compiler (gcc), which builds the clock-fault shim (internal/clockfault)
deps:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server ..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }
	@command -v $${CC:-cc} >/dev/null 2>&1 || { \
	  echo "installing gcc (builds the clock-fault shim) ..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null; }

## redis-image: build $(REDIS_IMAGE) FROM scratch from Debian's redis-server (no registry needed)
redis-image: deps
	@if docker info >/dev/null 2>&1; then integration/image/build.sh $(REDIS_IMAGE); \
	else echo "no Docker engine answers: the integration suites run on redis-server processes only"; fi

## test: unit and integration tests, with the race detector, against real Redis masters
##   (every test whose behaviour depends on the connection path runs on both, as subtests).
##   The suites below run TEST_JOBS at a time, the longest first; each one's output
##   comes in one piece when it ends (docs/testing.md, "What runs at once"). The redlock
##   tests that load the CPUs on purpose (REDLOCK_ALONE) run last, when nothing else does.
##   The sub-make's suites need neither prerequisite again (SUITE_DEPS, IMAGE_DEPS empty):
##   had they to wait for redis-image, the suites that need no image would take the
##   first slots, out of the listed order.
TEST_JOBS ?= 3
SUITE_DEPS ?= deps
IMAGE_DEPS ?= deps redis-image
test: deps redis-image
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target ALONE_RUN=skip SUITE_DEPS= IMAGE_DEPS= \
	  test-redlock test-integration test-root test-sim test-static test-goredis test-rueidis test-valkey test-otel
	$(MAKE) --no-print-directory ALONE_RUN=only SUITE_DEPS= test-redlock

## test-redlock: the redlock package, whose tests mostly wait (TTLs, frozen masters), in
##   REDLOCK_SHARDS processes at once, each running its share of the tests one after the
##   other (and TEST_PARALLEL of those marked t.Parallel at once)
REDLOCK_SHARDS ?= 3
TEST_PARALLEL ?= 4
##   The tests that load the CPUs on purpose run alone after the shards (REDLOCK_ALONE;
##   ALONE_RUN=skip leaves them out, ALONE_RUN=only runs only them: tools/testshards.sh).
REDLOCK_ALONE ?= UnderLoad|oneStoppedMasterDoesNotSlowRounds|connectionsBoundedOnAStoppedMaster
ALONE_RUN ?= after
test-redlock: $(SUITE_DEPS)
	ALONE='$(REDLOCK_ALONE)' ALONE_RUN=$(ALONE_RUN) GO=$(GO) tools/testshards.sh $(REDLOCK_SHARDS) redlock -test.timeout=20m -test.parallel=$(TEST_PARALLEL)

## test-durations: measure how long each of the redlock package's tests takes (in
##   REDLOCK_SHARDS processes, as make test runs them) and write
##   tools/testdurations/redlock.txt, by which testshards.sh balances the shards;
##   run it again when tests are added or get slower
test-durations: deps
	DURATIONS_OUT=$(CURDIR)/tools/testdurations/redlock.txt ALONE='$(REDLOCK_ALONE)' GO=$(GO) \
	  tools/testshards.sh $(REDLOCK_SHARDS) redlock -test.timeout=20m -test.parallel=$(TEST_PARALLEL)

## test-root: the root module's other packages, with the race detector (but the
##   redlock package, and STATIC_PKGS: test-static)
STATIC_PKGS := github.com/quorumlock/quorumlock/internal/docs github.com/quorumlock/quorumlock/internal/testrules
test-root: $(IMAGE_DEPS)
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list $(PKGS) | grep -vx -e github.com/quorumlock/quorumlock/redlock $(addprefix -e ,$(STATIC_PKGS)))

## test-static: the checks that read and compile the code (doc snippets, the test rules):
##   CPU-bound and waiting on no timer, so at a low CPU priority, beside the suites
##   that do wait on timers
test-static: $(SUITE_DEPS)
	nice -n 10 $(GO) test -race -count=1 -timeout 20m $(STATIC_PKGS)

## test-integration: the integration module's suites in their make test form (short
##   nemesis and clock runs; `make integration` for the long ones)
test-integration: $(IMAGE_DEPS)
	cd integration && $(GO) test -race -count=1 -timeout 20m ./...

## test-sim: the simulator's module (sim/): a short seeded simulation and the differential
##   test of the simulated master against a real redis-server; CPU-bound on a virtual
##   clock, so at a low CPU priority
test-sim: $(SUITE_DEPS)
	cd sim && nice -n 10 $(GO) test -race -count=1 -timeout 20m ./...

## test-goredis: the go-redis v9 adapter's module (goredis/), against real Redis masters
##   (the conformance suite and the Cluster members' cases through goredis.New are in
##   integration/goredis, so that the adapter's module requires no test harness)
test-goredis: $(IMAGE_DEPS)
	cd goredis && $(GO) test -race -count=1 -timeout 10m ./...

## test-rueidis: the rueidis adapter's module (rueidis/), against real redis-server masters
##   (the conformance suite through rueidis.New is in integration/rueidis)
test-rueidis: $(SUITE_DEPS)
	cd rueidis && $(GO) test -race -count=1 -timeout 10m ./...

## test-valkey: the valkey-go adapter's module (valkey/, generated from rueidis/ by go generate),
##   against real redis-server masters (Debian has no valkey-server); the conformance suite
##   through valkey.New is in integration/rueidis, beside rueidis.New's
test-valkey: $(SUITE_DEPS)
	cd valkey && $(GO) test -race -count=1 -timeout 10m ./...

## test-otel: the OpenTelemetry observer's module (otel/), against real Redis masters
test-otel: $(SUITE_DEPS)
	cd otel && $(GO) test -race -count=1 -timeout 10m ./...

## unit: the library module's tests (integration/ is a module of its own), without the race detector (faster)
unit: deps
	$(GO) test -count=1 $(PKGS)

## short: the unit tests only (quorum logic on in-memory masters, the fake clock,
##   parsers), with the race detector; needs no redis-server or Docker: every test
##   that needs real Redis skips under -short, saying so
short:
	$(GO) test -race -short -count=1 $(PKGS)
	cd integration && $(GO) test -race -short -count=1 ./...
	cd sim && $(GO) test -race -short -count=1 ./...

## integration: the suites that kill, pause, restart and partition real masters
##   (NEMESIS=10m for a soak; QUORUMLOCK_BACKEND=docker|process for one backend)
##   and masters whose clocks drift and jump (CLOCKS: the suite within the drift allowance)
NEMESIS ?= 30s
CLOCKS ?= 2m
##   (-nemesis and -clocks are flags of the suites' own package only: the others' test binaries would reject them)
integration: deps redis-image
	cd integration && { $(GO) test -race -count=1 -timeout 60m -v . -args -nemesis=$(NEMESIS) -clocks=$(CLOCKS) && \
	  $(GO) test -race -count=1 -timeout 30m -v $$($(GO) list ./... | grep -vx github.com/quorumlock/quorumlock/integration); } 2>&1 | \
	  grep -Ev '^=== (RUN|PAUSE|CONT)'; exit $${PIPESTATUS[0]}
	@# the nemesis on members that are Redis Clusters (slot migrations under load), go-redis adapter
	cd integration && $(GO) test -race -count=1 -timeout 30m -v -run 'TestNew_clusterMembers_nemesis' ./goredis -args -cluster-nemesis=$(NEMESIS) 2>&1 | \
	  grep -Ev '^=== (RUN|PAUSE|CONT)|pool.go:'; exit $${PIPESTATUS[0]}

## nemesis-semaphore: the semaphore under the nemesis (pauses, kills with AOF, clocks within
##   the allowance): 16 clients, 3 permits, N=5, until SEM_GRANTS permits were granted; checks
##   that at most 3 are valid at once (make test runs it for 200 grants)
SEM_GRANTS ?= 20000
nemesis-semaphore: deps
	cd integration && QUORUMLOCK_BACKEND=process $(GO) test -race -count=1 -timeout 60m -v -run '^TestSemaphoreNemesis_' . \
	  -args -semaphore-grants=$(SEM_GRANTS) 2>&1 | grep -Ev '^=== (RUN|PAUSE|CONT)'; exit $${PIPESTATUS[0]}

## mutants-clock: the clock suite's hand-over test against each mutant in
##   integration/testdata/mutants (the drift term left out of validity),
##   applied with go test -overlay: each must fail it, MUTANT_RUNS times
##   (about 20 s a run); the real code must pass it as often
MUTANT_RUNS ?= 1
mutants-clock: deps
	GO=$(GO) integration/testdata/mutants/run.sh -real -n $(MUTANT_RUNS)

## soak: the nemesis with every fault kind the process backend makes (pauses, kills,
##   clocks that drift and jump within the assumptions) for SOAK, N=5, 32 clients on
##   8 keys (SOAK_KEYS), without the race detector; prints grants, faults by kind, overlaps, lost
##   updates, stale-write refusals, tokens backwards. Not in CI.
SOAK ?= 30m
SOAK_KEYS ?= 8
soak: deps
	cd integration && $(GO) test -count=1 -timeout 0 -v -run '^TestSoak$$' . -args -soak=$(SOAK) -soak-keys=$(SOAK_KEYS) 2>&1 | \
	  grep -Ev '^=== (RUN|PAUSE|CONT)'; exit $${PIPESTATUS[0]}

## clean-containers: remove every container and network the suites made
clean-containers:
	-docker ps -aq --filter label=org.quorumlock.test=1 | xargs -r docker rm -f
	-docker network ls -q --filter label=org.quorumlock.test=1 | xargs -r docker network rm

## api: compare the exported API of every published package with its golden file in api/
api:
	$(GO) test -count=1 ./internal/apigolden

## api-update: rewrite the golden files in api/ after a deliberate API change (commit them with it)
api-update:
	$(GO) test -count=1 ./internal/apigolden -update

## race: same as test
race: test

## lint: go vet, gofmt, go.mod/go.sum tidy and golangci-lint in every module of modules.txt
##   (the release tool fails if a go.mod in the tree is not listed there)
MODULES_CMD = cd tools/release && $(GO) run . modules -root ../..
lint: vet fmt tidy golangci
tidy:
	@mods=$$($(MODULES_CMD)) || exit 1; for d in $$mods; do \
	  echo "go mod tidy -diff ($$d)"; (cd $$d && $(GO) mod tidy -diff) || exit 1; done
vet:
	@mods=$$($(MODULES_CMD)) || exit 1; for d in $$mods; do \
	  echo "go vet ($$d)"; (cd $$d && $(GO) vet ./...) || exit 1; done
fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## release-prepare: in a clean clone, VERSION=vX.Y.Z: move CHANGELOG's Unreleased entries under
##   VERSION, require VERSION of every published module from every module, tidy, commit, and
##   tag each published module (VERSION, <dir>/VERSION); then push the tags (docs/versioning.md)
release-prepare:
	@test -n "$(VERSION)" || { echo "usage: make release-prepare VERSION=vX.Y.Z"; exit 2; }
	cd tools/release && $(GO) run . prepare -root ../.. -version $(VERSION)

## release-check: a scratch release (v0.99.0) of a clone of this tree, a file module proxy from its
##   tags, and for each published module a new module outside the repository that go gets, tidies,
##   builds and vets a program using it, on the newest Go and on the oldest its go line admits
release-check:
	cd tools/release && $(GO) run . check -root ../..

## test-oldest: each published module built, vetted and its -short tests run on the oldest Go its
##   go line admits (the newest patch of that minor version, fetched from the module proxy)
test-oldest:
	@lines=$$(cd tools/release && $(GO) run . oldest -root ../..) || exit 1; \
	echo "$$lines" | while read -r d tc; do \
	  echo "== $$d on $$tc"; \
	  (cd $$d && export GOTOOLCHAIN=$$tc && $(GO) version && $(GO) build ./... && $(GO) vet ./... && \
	    $(GO) test -short -count=1 ./...) || exit 1; \
	done

## golangci: golangci-lint (.golangci.yml) in every module of modules.txt. The linter is built
##   from the module proxy at GOLANGCI_LINT_VERSION into bin/ (gitignored).
.PHONY: golangci
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(CURDIR)/bin/golangci-lint-$(GOLANGCI_LINT_VERSION)
$(GOLANGCI_LINT):
	@mkdir -p $(CURDIR)/bin/.golangci-build
	GOBIN=$(CURDIR)/bin/.golangci-build $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(CURDIR)/bin/.golangci-build/golangci-lint $@
golangci: $(GOLANGCI_LINT)
	@mods=$$($(MODULES_CMD)) || exit 1; fail=; \
	for d in $$mods; do echo "golangci-lint: $$d"; \
	  (cd $$d && $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...) || fail="$$fail $$d"; \
	done; if [ -n "$$fail" ]; then echo "golangci-lint found problems in:$$fail"; exit 1; fi

## bench: micro-benchmarks with allocations
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## demo: the quorum at work on five throwaway redis-server masters (or REDLOCK_MASTERS), then
##   what the otel observer reports of a short run (its metrics, a trace with a frozen master)
demo: deps
	$(GO) run ./cmd/demo
	cd otel && $(GO) run ./internal/demo

## fuzz: each fuzzer for FUZZTIME (URL parsing, the RESP framing guard, reply decoding, ACL error explanation, companion keys)
##   FUZZTIME is a count of inputs (30000x) by default: with a duration (10s), Go before 1.27 can end
##   a fuzzer that found nothing with "context deadline exceeded" when a worker is still busy at the
##   deadline (golang/go#75804; CI saw it on a loaded machine). A duration still works: FUZZTIME=1m.
FUZZTIME ?= 30000x
FUZZFLAGS = -run '^$$' -timeout 10m -fuzztime $(FUZZTIME)
fuzz:
	$(GO) test $(FUZZFLAGS) -fuzz '^FuzzParseURL$$' ./pool
	$(GO) test $(FUZZFLAGS) -fuzz '^FuzzGuard$$' ./pool
	$(GO) test $(FUZZFLAGS) -fuzz '^FuzzGuardDifferential$$' ./pool
	$(GO) test $(FUZZFLAGS) -fuzz '^FuzzDecode$$' ./redlock
	$(GO) test $(FUZZFLAGS) -fuzz '^FuzzExplain$$' ./internal/scripts
	$(GO) test $(FUZZFLAGS) -fuzz '^FuzzCompanion$$' ./internal/keys

## bench-deps: redis-benchmark (Debian's redis-tools) for the masters' ceiling, when it is missing
bench-deps: deps
	@command -v redis-benchmark >/dev/null 2>&1 || { \
	  echo "installing redis-tools (redis-benchmark) ..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-tools >/dev/null; }

## bench-peers: quorumlock beside go-redsync and bsm/redislock on the same local masters, judged
##   against the performance targets; writes docs/benchmarks.md (about 10 minutes)
BENCH_DURATION ?= 3s
bench-peers: bench-deps
	cd bench && $(GO) run . -duration $(BENCH_DURATION) -out ../docs/benchmarks.md

## bench-peers-quick: only the cells the targets are judged on, 1 s each, printed, nothing written (about a minute)
bench-peers-quick: bench-deps
	cd bench && $(GO) run . -quick

## sim: the simulator (module sim/): clients take, extend and release locks on
##   simulated masters that run the library's Lua scripts, with faults, on
##   synctest's virtual clock, checking the invariants at every step. Runs new
##   seeds for DURATION (one lane per CPU), or replays SEED; OPS operations per
##   simulation. A failure prints its seed and a shrunk list of its operations and
##   faults (shrinking for SHRINK at most), written to a file; KINDS=reentrant,read
##   draws only those operations; REORDER=true lets a resumed master read its
##   connections in no fixed order. `make sim SEED=...`
##   replays the seed, `make sim SEED=... SCRIPT=file` the shrunk list (each runs
##   until it fails, REPLAYS times at most: Go's scheduler is not seeded).
SEED ?= 0
OPS ?= 5000
DURATION ?= 1m
REPLAYS ?= 10
SHRINK ?= 60s
SCRIPT ?=
KINDS ?=
REORDER ?= false
SIM_TIMEOUT ?= 2h
sim:
	cd sim && GOGC=400 $(GO) test -count=1 -timeout $(SIM_TIMEOUT) -run '^TestSim_noTwoValidHolders$$' -v . \
	  -args -seed=$(SEED) -ops=$(OPS) -duration=$(DURATION) -replays=$(REPLAYS) -shrink=$(SHRINK) -script=$(SCRIPT) -kinds=$(KINDS) -reorder=$(REORDER) 2>&1 | \
	  grep -Ev '^=== (RUN|PAUSE|CONT)'; exit $${PIPESTATUS[0]}

## mutants: both lists of deliberately reintroduced bugs: the simulator's and the clock suite's
mutants: mutants-sim mutants-clock

## mutants-sim: the simulator against deliberately reintroduced bugs (sim/mutants/*.patch,
##   each applied to a temporary copy of the repository; docs/testing.md lists them):
##   each must fail within BUDGET on random seeds, naming the seed. MUTANTS=name ... for some.
BUDGET ?= 60s
MUTANTS ?=
mutants-sim:
	BUDGET=$(BUDGET) OPS=$(OPS) GO=$(GO) sim/mutants/run.sh $(MUTANTS)
