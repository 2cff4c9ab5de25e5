package redlock

import (
	"context"
	"fmt"
	"time"
)

// Minimum hold (WithMinHold), for scheduled jobs.
//
// A job that runs once per period takes the period's lock, checks under
// it whether the period's work is done, and releases. A replica whose
// schedule fires late (a skewed clock, a pause) would otherwise find the
// key free right after the release and run the same period again. With a
// minimum hold, a release before the minimum deletes nothing: it sets the
// key's time to live, where this lock's token still holds it, to what is
// left of the minimum — the extension script, token-checked, so it never
// touches another holder's key — and the key then expires on its own.
// docs/design.md ("Minimum hold") argues what it promises.

// WithMinHold keeps the lock's key on the masters for at least d from the
// acquisition, like ShedLock's lockAtLeastFor: a Release before then does
// not delete it but sets its time to live to what is left of d, where it
// still holds this lock's token, so no other client can take the key
// before then. The Lock itself is released as usual: Lost closes, and
// Extend fails. A Release after d deletes the key as without the option.
//
// The minimum is counted on the client's clock from the start of the
// winning attempt, and each master counts what is left of it from when it
// runs the release: a master whose clock runs fast may let the key go up
// to the drift allowance early, one that runs the release late keeps the
// key that much longer, and one that misses it keeps the key until its
// own time to live. It is a guard against running a scheduled job twice,
// not a safety property: fence the job's results (WithFencing) where a
// repeat must never be committed.
//
// Plain locks (Acquire, TryAcquire, Do, with or without WithFair and
// WithFencing) and a semaphore's permits (NewSemaphore: a permit released
// early keeps its slot) take it; read-write, reentrant and multi-key locks
// and locks with WithHolderFence (elections) refuse it (ErrInvalid). d
// must not be negative. The default, 0, keeps no minimum.
func WithMinHold(d time.Duration) LockOption { return func(c *lockConfig) { c.minHold = d } }

// checkMinHold rejects a negative minimum and one longer than a TTL may
// be.
func checkMinHold(lc *lockConfig) error {
	switch {
	case lc.minHold < 0:
		return fmt.Errorf("%w: min hold must not be negative, got %v", ErrInvalid, lc.minHold)
	case lc.minHold > maxTTL:
		return fmt.Errorf("%w: min hold %v is longer than the maximum %v", ErrInvalid, lc.minHold, maxTTL)
	case lc.minHold > 0 && lc.fenceRec:
		return fmt.Errorf("%w: WithHolderFence (an election) does not support WithMinHold", ErrInvalid)
	}
	return nil
}

// minHoldLeft returns how much of the lock's minimum hold is left at now,
// in whole milliseconds (0 when there is none, or it has passed).
func (l *Lock) minHoldLeft(now time.Time) time.Duration {
	if l.minHold <= 0 {
		return 0
	}
	left := l.acquired.Add(l.minHold).Sub(now)
	// Rounded up: the key must not expire before the minimum.
	left = (left + time.Millisecond - 1).Truncate(time.Millisecond)
	if left < time.Millisecond {
		return 0
	}
	return left
}

// releaseEarly is Release before the minimum hold has passed: instead of
// deleting the key, every master still holding the token gets its time to
// live set to left. A master answers 1 when it did so (the key is kept for
// the minimum, and is free of the token afterwards) and 0 when it does not
// hold the token, which Release counts as it counts its own answers. The
// caller holds op.
func (l *Lock) releaseEarly(ctx context.Context, left time.Duration) (*round, tally, error) {
	r, err := l.c.startRound(ctx, opExtend, l.key, l.token, left, l.follow(), l.kind(), nil)
	if err != nil {
		return nil, tally{}, err
	}
	l.chain = r
	t := l.c.collect(ctx, r)
	if k := l.kind(); k.leaves() {
		// A fair holder's entry heads the key's queue: left there, it
		// would keep every fair waiter out until it expired, past the
		// minimum. It leaves the queue now, in the background, after this
		// round's command on each master.
		if lr, err := l.c.startRound(context.Background(), opLeave, l.key, "", 0, r, k, nil); err == nil {
			l.chain = lr
		}
	}
	return r, t, nil
}
