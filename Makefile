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

.PHONY: all test test-goredis unit short integration race lint vet fmt tidy bench bench-peers bench-peers-quick bench-deps demo deps redis-image clean-containers fuzz

all: lint test

## deps: install redis-server from Debian's packages when it is missing
deps:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server ..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }

## redis-image: build $(REDIS_IMAGE) FROM scratch from Debian's redis-server (no registry needed)
redis-image: deps
	@if docker info >/dev/null 2>&1; then integration/image/build.sh $(REDIS_IMAGE); \
	else echo "no Docker engine answers: the integration suites run on redis-server processes only"; fi

## test: unit and integration tests, with the race detector, against real Redis masters
##   (every test whose behaviour depends on the connection path runs on both, as subtests)
test: deps redis-image
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	$(MAKE) test-goredis

## test-goredis: the go-redis v9 adapter's module (goredis/), against real Redis masters
test-goredis: deps
	cd goredis && $(GO) test -race -count=1 -timeout 10m ./...

## unit: the tests outside integration/, without the race detector (faster)
unit: deps
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /integration)

## short: the unit tests only (quorum logic on in-memory masters, the fake clock,
##   parsers), with the race detector; needs no redis-server or Docker: every test
##   that needs real Redis skips under -short, saying so
short:
	$(GO) test -race -short -count=1 $(PKGS)

## integration: the suites that kill, pause, restart and partition real masters
##   (NEMESIS=10m for a soak; QUORUMLOCK_BACKEND=docker|process for one backend)
NEMESIS ?= 30s
integration: deps redis-image
	$(GO) test -race -count=1 -timeout 60m -v ./integration/... -args -nemesis=$(NEMESIS) 2>&1 | \
	  grep -Ev '^=== (RUN|PAUSE|CONT)'; exit $${PIPESTATUS[0]}

## clean-containers: remove every container and network the suites made
clean-containers:
	-docker ps -aq --filter label=org.quorumlock.test=1 | xargs -r docker rm -f
	-docker network ls -q --filter label=org.quorumlock.test=1 | xargs -r docker network rm

## race: same as test
race: test

## lint: go vet (the library, the bench/ and goredis/ modules), gofmt, and go.mod/go.sum tidy in all three
lint: vet fmt tidy
tidy:
	$(GO) mod tidy -diff
	cd bench && $(GO) mod tidy -diff
	cd goredis && $(GO) mod tidy -diff
vet:
	$(GO) vet $(PKGS)
	cd bench && $(GO) vet ./...
	cd goredis && $(GO) vet ./...
fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## bench: micro-benchmarks with allocations
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## demo: the quorum at work on five throwaway local masters (or REDLOCK_MASTERS)
demo: deps redis-image
	$(GO) run ./cmd/demo

## fuzz: each fuzzer for FUZZTIME (URL parsing, the RESP framing guard, reply decoding, ACL error explanation, companion keys)
FUZZTIME ?= 10s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseURL$$' -fuzztime $(FUZZTIME) ./pool
	$(GO) test -run '^$$' -fuzz '^FuzzGuard$$' -fuzztime $(FUZZTIME) ./pool
	$(GO) test -run '^$$' -fuzz '^FuzzGuardDifferential$$' -fuzztime $(FUZZTIME) ./pool
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./redlock
	$(GO) test -run '^$$' -fuzz '^FuzzExplain$$' -fuzztime $(FUZZTIME) ./internal/scripts
	$(GO) test -run '^$$' -fuzz '^FuzzCompanion$$' -fuzztime $(FUZZTIME) ./internal/keys

## bench-deps: redis-benchmark (Debian's redis-tools) for the masters' ceiling, when it is missing
bench-deps: deps
	@command -v redis-benchmark >/dev/null 2>&1 || { \
	  echo "installing redis-tools (redis-benchmark) ..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-tools >/dev/null; }

## bench-peers: quorumlock beside go-redsync and bsm/redislock on the same local masters, judged
##   against issue 15's targets; writes docs/benchmarks.md (about 8 minutes)
BENCH_DURATION ?= 3s
bench-peers: bench-deps
	cd bench && $(GO) run . -duration $(BENCH_DURATION) -out ../docs/benchmarks.md

## bench-peers-quick: only the cells the targets are judged on, 1 s each, printed, nothing written (about a minute)
bench-peers-quick: bench-deps
	cd bench && $(GO) run . -quick
