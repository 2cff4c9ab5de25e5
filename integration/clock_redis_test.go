package integration_test

// The clock suites: masters whose clocks drift and jump (the process
// backend's WithClockFaults; docs/testing.md, "Clock faults"). Within the
// drift allowance the lock keeps its promise; beyond it the checker must
// catch overlapping holders — the hazard asserted so that docs/safety.md
// stays true, as TestRestartAmnesia does for amnesia.

import (
	"flag"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/integration/cluster"
)

var clocksDuration = flag.Duration("clocks", 10*time.Second,
	"how long the clock suite within the drift allowance runs (make integration: longer)")

// hazardBound is how long a hazard suite may look for its first overlap
// (on a quiet machine it comes within seconds; on one loaded many times
// over, grants slow to one every few seconds).
const hazardBound = 3 * time.Minute

// clockCluster is N=5 masters with AOF always whose clocks the test
// steers. Clock faults need the process backend, whatever
// $QUORUMLOCK_BACKEND says.
func clockCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	t.Log("clock faults run on the process backend (the docker image carries no clock shim)")
	return cluster.Start(t, 5, cluster.WithBackend(cluster.Process), cluster.WithAOF(), cluster.WithClockFaults())
}

// Two masters of five run 0.5 % fast (the default drift factor sets aside
// 1 % of the TTL) while the nemesis pauses and kills minorities and moves
// clocks within the allowance; holders keep every lock to the end of its
// validity, the case a fast clock threatens. Nothing may overlap.
//
// This suite checks the faults together; it cannot tell a lock that sets
// nothing aside for drift from a correct one: masters 0.5 % fast let a
// 500 ms key go 2.5 ms early, less than the next client takes to notice
// an expiry, so such a lock overlaps nobody here. The drift term is put to the test by
// TestClockDrift_fastQuorumFreesKeyOnlyAfterValidity (clock_fastquorum_redis_test.go).
func TestClockDrift_withinAllowance(t *testing.T) {
	c := clockCluster(t)
	r := runNemesis(t, c, "2 of 5 masters 0.5% fast, drift factor 1%", nemesisConfig{
		clients: 8, duration: *clocksDuration, ttl: 500 * time.Millisecond,
		fastMasters: 2, fastRate: 1.005, holdToExpiry: true, staleTTL: 500 * time.Millisecond,
		kinds: []string{faultPause, faultKill, faultClockRate, faultClockBack, faultClockFwd},
	})
	// A holder starved past its validity by a busy machine is assumption
	// 5 (the holder's own pause), which this suite is not about: counted
	// and printed; the windows are judged by their validity, so an
	// overlap is still a failure.
	r.overrunIsLoad = true
	r.requireSafe(t)
}

// The hazard: two masters of five run 50 % fast. While pauses of the
// other three make grants land on bare quorums that include both, the
// fast pair lets the key go after two thirds of the TTL and another client
// wins it with the masters the holder never reached — inside the holder's
// validity. The checker must see it.
func TestClockDrift_beyondAllowanceOverlaps(t *testing.T) {
	c := clockCluster(t)
	r := runNemesis(t, c, "2 of 5 masters 50% fast", nemesisConfig{
		clients: 8, duration: hazardBound, ttl: 500 * time.Millisecond,
		fastMasters: 2, fastRate: 1.5, holdToExpiry: true, stopAfterOverlaps: 1, staleTTL: 500 * time.Millisecond,
		kinds: []string{faultPause}, victims: []int{2, 3, 4},
	})
	requireHazard(t, r)
}

// The hazard: the clocks of masters 0 and 1 jump forward by more than the
// TTL at every nemesis step, which expires every key on them at once;
// while pauses of the other three make grants land on bare quorums, a
// second client wins the key inside the first one's validity.
func TestClockJump_beyondTTLOverlaps(t *testing.T) {
	c := clockCluster(t)
	r := runNemesis(t, c, "forward jumps of 1.5×TTL", nemesisConfig{
		clients: 8, duration: hazardBound, ttl: 500 * time.Millisecond,
		fastMasters: 2, leapFast: true, holdToExpiry: true, stopAfterOverlaps: 1, staleTTL: 500 * time.Millisecond,
		kinds: []string{faultPause}, victims: []int{2, 3, 4},
	})
	requireHazard(t, r)
}

// requireHazard asserts that the checker caught overlapping holders.
func requireHazard(t *testing.T, r *nemesisResult) {
	t.Helper()
	if r.acquired == 0 {
		t.Fatal("no lock was ever acquired")
	}
	if len(r.overlaps) == 0 {
		t.Fatalf("no overlapping windows in %v (%d grants) beyond the clock assumption: the hazard docs/safety.md describes was not seen, or the checker is blind", r.elapsed.Round(time.Second), r.acquired)
	}
	for i, s := range r.overlaps {
		if i == 3 {
			break
		}
		t.Log("caught, as expected: " + s)
	}
}
