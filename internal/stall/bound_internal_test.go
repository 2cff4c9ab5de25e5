package stall

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
)

// boundClient is the Bound of a Client of n masters with the per-master
// timeout (no transports: only its figures).
func boundClient(n int, timeout time.Duration) *Bound {
	return NewBound(clock.Real(), nil, n, n/2+1, timeout, false)
}

func TestAdaptiveBound_isTheTimeoutOnAFastHost(t *testing.T) {
	c := boundClient(5, 50*time.Millisecond)
	now := time.Now()
	for i := range 5 {
		c.Note(i, now.Add(-2*time.Millisecond), now)
	}
	if got := c.For(8*time.Second, now); got != c.timeout {
		t.Errorf("bound %v on a host whose masters answer in 2 ms, want the timeout %v", got, c.timeout)
	}
}

func TestAdaptiveBound_followsAQuorumOfSlowMasters(t *testing.T) {
	c := boundClient(5, 50*time.Millisecond)
	now := time.Now()
	for i, took := range []time.Duration{60, 70, 80, 900, 2000} {
		c.Note(i, now.Add(-took*time.Millisecond), now)
	}
	// The quorum-th lowest peak (80 ms), twice: the two slowest masters
	// do not count.
	if got, want := c.For(8*time.Second, now), 160*time.Millisecond; got != want {
		t.Errorf("bound %v, want %v", got, want)
	}
}

func TestAdaptiveBound_ignoresAMinorityOfSlowMasters(t *testing.T) {
	c := boundClient(5, 50*time.Millisecond)
	now := time.Now()
	c.Note(3, now.Add(-time.Second), now)
	c.Note(4, now.Add(-time.Second), now)
	if got := c.For(8*time.Second, now); got != c.timeout {
		t.Errorf("bound %v with two slow masters of five, want the timeout %v", got, c.timeout)
	}
}

func TestAdaptiveBound_isCappedByTheTimeoutAndTheTTL(t *testing.T) {
	c := boundClient(3, 50*time.Millisecond)
	now := time.Now()
	for i := range 3 {
		c.Note(i, now.Add(-5*time.Second), now)
	}
	for _, tc := range []struct {
		ttl, want time.Duration
	}{
		{30 * time.Second, time.Second},                 // the stall bound
		{8 * time.Second, 800 * time.Millisecond},       // a tenth of the TTL
		{100 * time.Millisecond, 50 * time.Millisecond}, // never below the timeout
	} {
		if got := c.For(tc.ttl, now); got != tc.want {
			t.Errorf("ttl %v: bound %v, want %v", tc.ttl, got, tc.want)
		}
	}
}

func TestAdaptiveBound_forgetsASlowSpell(t *testing.T) {
	c := boundClient(3, 50*time.Millisecond)
	now := time.Now()
	for i := range 3 {
		c.Note(i, now.Add(-100*time.Millisecond), now)
	}
	if got, want := c.For(8*time.Second, now.Add(boundHalfLife)), 100*time.Millisecond; got != want {
		t.Errorf("one half-life later: bound %v, want %v", got, want)
	}
	if got := c.For(8*time.Second, now.Add(3*boundHalfLife)); got != c.timeout {
		t.Errorf("three half-lives later: bound %v, want the timeout %v", got, c.timeout)
	}
}

func TestAdaptiveBound_onlyOnTheRealClock(t *testing.T) {
	c := boundClient(3, 50*time.Millisecond)
	c.real = false
	now := time.Now()
	for i := range 3 {
		c.Note(i, now.Add(-time.Second), now)
	}
	if got := c.For(8*time.Second, now); got != c.timeout {
		t.Errorf("bound %v on a simulated clock, want the timeout %v", got, c.timeout)
	}
}
