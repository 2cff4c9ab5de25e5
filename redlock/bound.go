package redlock

import (
	"time"
)

// A round's wait for its masters is the Client's stall.Bound (c.bound):
// the adaptive bound, which follows what the masters' answers took of
// late, for acquisitions and extensions, and a longer wait for releases
// (ReleaseWait). The rounds that get the adaptive bound are chosen here.
// See "A busy host is not a silent master: the adaptive bound" in
// docs/design.md.

// boundFor returns how long a round of op with ttl waits for a master:
// the adaptive bound for acquisitions and extensions, the per-master
// timeout for the other rounds (a release waits c.bound.ReleaseWait).
func (c *Client) boundFor(op opKind, ttl time.Duration) time.Duration {
	if op != opAcquire && op != opExtend {
		return c.timeout
	}
	return c.bound.For(ttl, time.Now())
}

// boundRisen is asked by collect when the wait of round r, waited so
// far, ends with its outcome open: when the adaptive bound has risen
// since, it returns the bound now and how much longer, from now, the
// round waits on (stall.Bound.Risen). Else more is 0. Only acquisitions
// on the real clock; validity is counted from the round's start, so the
// longer wait only shortens it. An extension keeps its wait: the lock it
// extends may run out during a longer one, and a holder told
// ErrNotExtended in time can still try again.
func (c *Client) boundRisen(r *round, waited time.Duration, now time.Time) (b, more time.Duration) {
	if r.op != opAcquire {
		return waited, 0
	}
	return c.bound.Risen(time.Duration(r.ttlMS)*time.Millisecond, r.started(), waited, now)
}
