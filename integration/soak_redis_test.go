package integration_test

import (
	"flag"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/integration/cluster"
)

var (
	soakDuration = flag.Duration("soak", 0,
		"run TestSoak for this long (make soak); 0 skips it")
	soakKeys = flag.Int("soak-keys", 8,
		"TestSoak's keys, each contended by 4 clients: a grant's rate is bound by each key's round trips, not the CPU, so more keys grant more")
)

// TestSoak is the nemesis with every fault kind the process backend can
// make — pauses, kills with restarts, and clocks that drift within ±0.5 %
// and jump (back by up to 1 s, forward by up to 1 ms) — for -soak (`make
// soak SOAK=30m`). It asserts what TestNemesis asserts and prints grants,
// faults by kind, overlapping windows, lost updates, stale-write refusals
// and tokens that went backwards. Partitions need the docker backend,
// which cannot run clock faults; TestNemesis covers them there.
func TestSoak(t *testing.T) {
	if *soakDuration <= 0 {
		t.Skip("a soak runs only when asked: make soak SOAK=30m (or -args -soak=30m)")
	}
	c := cluster.Start(t, 5, cluster.WithBackend(cluster.Process), cluster.WithAOF(), cluster.WithClockFaults())
	r := runNemesis(t, c, "soak, N=5, process backend", nemesisConfig{
		clients: 4 * *soakKeys, keys: *soakKeys, duration: *soakDuration,
		// Fewer and shorter paused holders than TestNemesis: each keeps
		// the key until its TTL, and a soak should grant much.
		staleEvery: 64, staleTTL: 400 * time.Millisecond,
		kinds: soakKinds,
	})
	// Hours on a shared machine starve a holder now and then past its
	// validity (assumption 5); fencing covers that, and the count is
	// printed. Everything else fails the soak.
	r.overrunIsLoad = true
	r.requireSafe(t)
	t.Logf("SOAK: %v: grants %d; faults %v; overlapping windows %d; lost updates %d; stale writes %d, refused %d; tokens backwards %d; overran %d",
		r.elapsed.Round(time.Second), r.acquired, r.faults, len(r.overlaps), r.lostUpdates(), r.staleWrites, r.staleRefused, len(r.backwards), r.overran)
}

var soakKinds = []string{faultPause, faultKill, faultClockRate, faultClockBack, faultClockFwd}
