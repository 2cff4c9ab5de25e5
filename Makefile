# quorumlock — see README.md.
GO ?= go
PKGS := ./...

.PHONY: all test unit race lint vet fmt bench demo deps

all: lint test

## deps: install redis-server from Debian's packages when it is missing
deps:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server ..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }

## test: every test, with the race detector, against real redis-server masters
test: deps
	$(GO) test -race -count=1 $(PKGS)

## unit: the tests without the race detector (faster)
unit: deps
	$(GO) test -count=1 $(PKGS)

## race: same as test
race: test

## lint: go vet and gofmt
lint: vet fmt
vet:
	$(GO) vet $(PKGS)
fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

## bench: micro-benchmarks with allocations
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

## demo: the quorum at work on five throwaway local masters (or REDLOCK_MASTERS)
demo: deps
	$(GO) run ./cmd/demo
