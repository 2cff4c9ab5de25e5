package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lock is a lock held on a quorum of masters, as returned by Acquire and
// TryAcquire. It is valid until Until(); past that moment another client
// may hold the same key.
//
// A Lock is safe for concurrent use: Extend and Release calls are
// serialised. Releasing twice is harmless.
type Lock struct {
	c     *Client
	key   string
	token string

	acq        *round        // the acquisition, which extensions and the release follow
	chain      *round        // a reentrant lock's latest count round, which later rounds follow
	fence      uint64        // the fencing token; 0 without WithFencing
	ttl        time.Duration // for auto-extension
	autoPeriod time.Duration // 0: no auto-extension
	maxHold    time.Duration
	acquired   time.Time
	lost       chan struct{} // closed when the lock can no longer be trusted

	op sync.Mutex // serialises Extend and Release

	mu       sync.Mutex // guards the fields below
	until    time.Time
	released bool
	lostErr  error
	onLost   func(error)
	mon      *monitor // the running monitor, if any
}

func newLock(c *Client, acq *round, start, until time.Time, lc *lockConfig) *Lock {
	l := &Lock{c: c, key: acq.key, token: acq.token, acq: acq, until: until, ttl: lc.ttl,
		maxHold: lc.maxHold, acquired: start, lost: make(chan struct{})}
	if lc.auto {
		l.autoPeriod = lc.autoPeriod
	}
	return l
}

// Key returns the locked key.
func (l *Lock) Key() string { return l.key }

// Token returns the random value that identifies this holder on every
// master.
func (l *Lock) Token() string { return l.token }

// Until returns the end of the lock's validity, on the client's clock
// (with a monotonic reading when it is the real clock). Compare it with
// time.Now(), or use time.Until.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Extend asks every master to set the lock's time to live to ttl, if it
// still holds this lock's token. It succeeds when a quorum did so within
// the new validity, which is then counted from the start of the call.
//
// It returns an error matching ErrLockLost when the lock had already
// expired by the local clock (nothing is sent) or a quorum of masters no
// longer holds its token; an expired lock is never silently taken again.
// It returns an error matching ErrNotExtended when too few masters
// answered while the old validity has not yet run out. Errors other than
// bad arguments are *QuorumError.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	c := l.c
	if err := c.checkTTL(ttl); err != nil {
		return err
	}
	ttl = ttl.Truncate(time.Millisecond)
	l.op.Lock()
	defer l.op.Unlock()

	start := c.clock.Now()
	until, err := l.checkHeld("extend", start)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: extend %q: %w", ErrNotExtended, l.key, err)
	}

	r, err := c.startRound(ctx, opExtend, l.key, l.token, ttl, l.follow(), l.shape())
	if err != nil {
		return err
	}
	t := c.collect(ctx, r)
	now := c.clock.Now()
	newUntil := start.Add(ttl - c.drift(ttl))
	if t.ok(c.quorum) && now.Before(newUntil) {
		l.mu.Lock()
		l.until = newUntil
		l.mu.Unlock()
		return nil
	}
	if t.no > len(c.masters)-c.quorum || !now.Before(until) {
		err := c.quorumError(t, r, ErrLockLost, t.ok(c.quorum))
		l.markLost(err)
		return err
	}
	return c.quorumError(t, r, ErrNotExtended, t.ok(c.quorum))
}

// follow returns the round the lock's next round must follow on each
// master (the pooled path sends them on different connections): the
// latest count round of a reentrant lock, else the acquisition. The
// caller holds l.op.
func (l *Lock) follow() *round {
	if l.chain != nil {
		return l.chain
	}
	return l.acq
}

// checkCtx rejects a nil context, which would otherwise panic deep inside.
func checkCtx(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context (use context.Background())", ErrInvalid)
	}
	return nil
}

// check rejects a nil or zero Lock (one not returned by an acquisition)
// and a nil context.
func (l *Lock) check(ctx context.Context) error {
	if l == nil || l.c == nil {
		return fmt.Errorf("%w: this Lock was not returned by an acquisition", ErrInvalid)
	}
	return checkCtx(ctx)
}

// checkHeld returns the lock's validity end, or an error when it was
// released or its validity ran out before start (then it is lost).
func (l *Lock) checkHeld(what string, start time.Time) (time.Time, error) {
	l.mu.Lock()
	released, until := l.released, l.until
	l.mu.Unlock()
	if released {
		return until, fmt.Errorf("%w: %s %q: the lock was released", ErrNotHeld, what, l.key)
	}
	if !start.Before(until) {
		err := fmt.Errorf("%w: %s %q: validity ran out %v ago", ErrLockLost, what, l.key, start.Sub(until))
		l.markLost(err)
		return until, err
	}
	return until, nil
}

// Release deletes the lock on every master that still holds its token. It
// returns nil when a quorum held it; an error matching ErrNotHeld when so
// many masters did not hold it that no quorum could have (the lock had
// expired or been taken), or when it was already released; and an error
// matching ErrNotReleased when too few masters answered to tell.
//
// The release is sent even when ctx has already ended, so that a deferred
// Release frees the lock; ctx bounds only how long the caller waits for
// the answers. Each master's command is bounded by the per-master timeout.
func (l *Lock) Release(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	c := l.c
	l.stopMonitor()
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	released := l.released
	l.released = true
	l.mu.Unlock()
	if released {
		return fmt.Errorf("%w: release %q: already released", ErrNotHeld, l.key)
	}
	defer l.markLost(ErrReleased)
	r, err := c.startRound(ctx, opRelease, l.key, l.token, 0, l.follow(), l.shape().withCount(0))
	if err != nil {
		return err
	}
	t := c.collect(ctx, r)
	if t.ok(c.quorum) {
		return nil
	}
	sentinel := ErrNotReleased
	if t.no > len(c.masters)-c.quorum {
		sentinel = ErrNotHeld
	}
	return c.quorumError(t, r, sentinel, false)
}
