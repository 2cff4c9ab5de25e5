package redlock_test

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// coreImports is every package outside the standard library that the
// core package's production files may import, with why. A new one is a
// deliberate choice: the core reaches its masters only through package
// transport: no redigo, no pool, no transport implementation.
var coreImports = map[string]string{
	"github.com/quorumlock/quorumlock/transport":           "the seam every transport is reached through",
	"github.com/quorumlock/quorumlock/clock":               "the Client's clock",
	"github.com/quorumlock/quorumlock/layout":              "the key layout on the masters",
	"github.com/quorumlock/quorumlock/observe":             "the observer and its events",
	"github.com/quorumlock/quorumlock/internal/keys":       "key validation",
	"github.com/quorumlock/quorumlock/internal/scripts":    "the lock's scripts",
	"github.com/quorumlock/quorumlock/internal/fault":      "failures the core and the redigo transports both name",
	"github.com/quorumlock/quorumlock/internal/stall":      "the Client's process-stall detector",
	"github.com/quorumlock/quorumlock/internal/jitter":     "the Client's random draws: backoffs, spreads, tokens",
	"github.com/quorumlock/quorumlock/internal/event":      "the one-shot event legs wait for each other with",
	"github.com/quorumlock/quorumlock/internal/legstate":   "a leg's states and their transitions",
	"github.com/quorumlock/quorumlock/internal/inspect":    "the reads of one master for Inspect and InspectHolder",
	"github.com/quorumlock/quorumlock/internal/health":     "each master's state for the logs and the observer",
	"github.com/quorumlock/quorumlock/internal/finish":     "the retries of releases and rollbacks a master missed",
	"github.com/quorumlock/quorumlock/internal/wake":       "whom a release's notice wakes",
	"github.com/quorumlock/quorumlock/internal/ident":      "the masters' run_ids: one vote per distinct server",
	"github.com/quorumlock/quorumlock/internal/waker":      "the waiters and the subscriptions that wake them",
	"github.com/quorumlock/quorumlock/internal/clienthook": "the hook package redigo makes its Clients through",
	"github.com/quorumlock/quorumlock/internal/testhook":   "test-only settings that other modules' tests reach",
	"github.com/google/uuid":                               "tokens",
	"github.com/hashicorp/go-multierror":                   "errors of many masters",
}

// transportImpls are packages of transport implementations and of the
// client libraries they wrap: the core must not import them, whatever
// coreImports says.
var transportImpls = []string{
	"github.com/quorumlock/quorumlock/goredis",
	"github.com/quorumlock/quorumlock/redigo",
	"github.com/quorumlock/quorumlock/sim",
	"github.com/redis/go-redis",
	"github.com/redis/rueidis",
}

func TestCoreImports_areOnlyTheListedOnes(t *testing.T) {
	pkg, err := build.Import("github.com/quorumlock/quorumlock/redlock", ".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.GoFiles) == 0 {
		t.Fatal("no production files found for package redlock")
	}
	for _, imp := range pkg.Imports {
		for _, impl := range transportImpls {
			if imp == impl || strings.HasPrefix(imp, impl+"/") {
				t.Errorf("the core package imports %s, a transport implementation", imp)
			}
		}
		if first, _, _ := strings.Cut(imp, "/"); !strings.Contains(first, ".") {
			continue // the standard library
		}
		if _, ok := coreImports[imp]; !ok {
			t.Errorf("the core package imports %s, which is not in coreImports", imp)
		}
	}
	for imp := range coreImports {
		if !slices.Contains(pkg.Imports, imp) {
			t.Errorf("coreImports lists %s, which the core package no longer imports: drop it", imp)
		}
	}
}
