package redlock

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/stall"
)

// boundClient is a Client of n masters with the per-master timeout, as
// the adaptive bound sees it (no transports: only its figures).
func boundClient(n int, timeout time.Duration) *Client {
	return &Client{timeout: timeout, quorum: n/2 + 1, bound: stall.NewBound(clock.Real(), nil, n, n/2+1, timeout, false), realClock: true}
}

func TestAdaptiveBound_onlyForAcquisitionsAndExtensions(t *testing.T) {
	c := boundClient(3, 50*time.Millisecond)
	now := time.Now()
	for i := range 3 {
		c.bound.Note(i, now.Add(-100*time.Millisecond), now)
	}
	for _, op := range []opKind{opAcquire, opExtend} {
		if got := c.boundFor(op, 8*time.Second); got <= c.timeout {
			t.Errorf("%v: bound %v, want more than the timeout", op, got)
		}
	}
	if got := c.boundFor(opRollback, 8*time.Second); got != c.timeout {
		t.Errorf("rollback: bound %v, want the timeout", got)
	}
}
