package redlock

import (
	"context"
	"strconv"
	"time"

	"github.com/quorumlock/quorumlock/layout"
)

// Fencing tokens (WithFencing).
//
// Every master keeps, per key, a counter in a companion key that shares
// the lock key's hash slot and has no TTL. A fenced acquisition is two
// rounds:
//
//  1. On each master a script sets the lock (SET NX PX) and, only when it
//     did, returns that master's counter.
//  2. With a quorum granted, the client picks T = 1 + the largest counter
//     among the masters that granted, and a second script raises the
//     counter to T on every master that still holds this lock's token.
//
// The acquisition succeeds only when a quorum commits T within the lock's
// validity. Any later holder's granting quorum meets this holder's commit
// quorum in at least one master, whose counter was already ≥ T when the
// later SET NX succeeded there (the commit ran while this lock was still
// set on it), so the later token is greater than T. docs/safety.md gives
// the argument and its assumptions.

// maxFence bounds fencing tokens: below it they stay exact in every
// language a resource may check them in (JSON numbers, Lua, JavaScript).
// A holder read (internal/inspect's ReadHolder) is given it too.
const maxFence = 1 << 53

// fencing is a fenced lock's counter key and, in a commit round, the token
// chosen.
type fencing struct {
	counter string // the companion key holding the counter
	arg     string // the chosen token, in decimal (commit rounds)
}

// FenceKey returns the name of the companion key that holds key's fencing
// counter on each master.
//
// Deprecated: use layout.FenceKey, which names every key a lock keeps on
// a master. FenceKey is removed in the next minor release.
func FenceKey(key string) string { return layout.FenceKey(key) }

// WithFencing gives the lock a fencing token (Lock.Fence): a number that is
// greater than the token of every holder of the same key granted before
// it, so that the resource the lock protects can refuse a write from a
// holder whose lock has expired (one that was paused, say). The token is
// committed to a quorum of masters as part of the acquisition, which
// costs one more round trip. The counters live in a companion key per
// lock key (FenceKey), without a TTL; tokens stay monotonic as long as the
// masters keep their data across restarts (see docs/safety.md).
func WithFencing() LockOption { return func(c *lockConfig) { c.fencing = true } }

// WithHolderFence makes a fenced lock (WithFencing, which it needs) record
// its fencing token beside its holder on each master: the commit that
// raises the fencing counter also writes the token in the holder's entry
// of the metadata hash (layout.MetaKey), in the same script step, and only
// while the key holds the lock's token. Client.InspectHolder reads it back
// with the holder (layout.Holder's Fence), so a reader that finds a quorum
// of masters with one holder and one fencing token knows that holder was
// granted that token: the counter alone, raised a round trip after the
// grant, can be read beside the next holder. The metadata hash is kept
// even without WithMetadata. Package election is built on it; locks with
// it refuse WithMinHold. The keys it writes: docs/design.md, "Reading an
// election's leader".
func WithHolderFence() LockOption { return func(c *lockConfig) { c.fenceRec = true } }

// Fence returns the lock's fencing token, or 0 for a lock acquired
// without WithFencing, or for a Lock no acquisition returned (nil or
// zero). Present it with every write to the
// protected resource, which must refuse a token lower than the highest it
// has seen.
func (l *Lock) Fence() uint64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// commitFence raises the fencing counters to 1 + the largest counter among
// the masters that granted acq, and reports the commit round's tally and
// the chosen token.
func (c *Client) commitFence(ctx context.Context, acq *round, t *tally, ttl time.Duration) (tally, *round, uint64, error) {
	var top uint64
	for i, v := range t.votes {
		if v == voteYes && acq.counters[i] > top {
			top = acq.counters[i]
		}
	}
	fence := top + 1
	f := &fencing{counter: acq.fence.counter, arg: strconv.FormatUint(fence, 10)}
	// The commit goes to every master, each after the acquisition's own
	// command there: a master that grants late still gets its counter
	// raised, which costs nothing and may save the quorum.
	r, err := c.startRound(ctx, opCommit, acq.key, acq.token, ttl, acq, acq.k, f)
	if err != nil {
		return tally{}, nil, 0, err
	}
	r.decide(false) // a commit needs no undoing: the acquisition's rollback removes the lock
	return c.collect(ctx, r), r, fence, nil
}
