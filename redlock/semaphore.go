package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/observe"
)

// MaxPermits is the largest permit count NewSemaphore accepts.
const MaxPermits = 1024

// Semaphore is a counting semaphore of k permits on one key: at most k
// holders at once, each with a Permit that expires at its TTL unless
// extended, like a lock. Each permit is one of k slots, and each slot is a
// lock of its own on the quorum (lock key layout.PermitKey(key, i)), so a
// permit is exactly as safe as a lock: two valid permits never share a slot
// (docs/design.md, "Semaphores"). A Semaphore sends nothing until used,
// holds no state of its permits and is safe for concurrent use; make one
// with Client.NewSemaphore.
type Semaphore struct {
	c       *Client
	key     string
	permits int
	opts    []LockOption
	lc      lockConfig // opts applied and checked
	slots   []string   // the slots' lock keys, by slot
}

// Permit is one permit of a Semaphore, held until it is released or its
// validity ends. It is a Lock on the permit's slot (Key names the slot's
// lock key, Fence its fencing token with WithFencing): Until, Extend,
// Release, Lost and Err behave as for any lock. Only the Semaphore's
// Acquire, TryAcquire and Do make one.
type Permit struct {
	*Lock
	slot    int
	permits int
	sem     string
}

// Slot returns the permit's slot: a number in [0, k) for the Semaphore of k
// permits that granted it.
func (p *Permit) Slot() int { return p.slot }

// Semaphore returns the key of the semaphore the permit belongs to.
func (p *Permit) Semaphore() string { return p.sem }

// NewSemaphore returns a semaphore of permits permits (1 to MaxPermits) on
// key. It sends nothing. opts apply to every permit: WithTTL (how long a
// permit whose holder died keeps its slot), WithAutoExtend, WithMaxHold,
// WithFencing (a fencing token per permit, counted per slot), WithMetadata
// (who holds it, for redlock status), WithMinHold (a permit released early
// keeps its slot until the minimum), WithBackoff and WithWait (a bound on
// Acquire's whole wait). WithFair is refused (ErrInvalid): waiters are woken
// by any slot's release, not served in order.
//
// Semaphores of different permit counts on one key share their slots:
// slot i is the same lock for all of them. One of k permits takes only slots
// below k, so while holders of a semaphore of k1 and one of k2 run at once,
// at most max(k1, k2) permits are held; when k shrinks, the permits held in
// the higher slots stay valid until released or expired, and no new one is
// granted there (docs/design.md, "Changing a semaphore's permit count").
// Keep key for the semaphore alone: no other kind of lock on it or its slots.
func (c *Client) NewSemaphore(key string, permits int, opts ...LockOption) (*Semaphore, error) {
	if c == nil || c.quorum == 0 {
		return nil, fmt.Errorf("%w: a Client that New did not make", ErrInvalid)
	}
	if key == "" {
		return nil, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if permits < 1 || permits > MaxPermits {
		return nil, fmt.Errorf("%w: semaphore %q: permits must be 1 to %d, got %d", ErrInvalid, key, MaxPermits, permits)
	}
	lc, err := c.lockConfig(layout.PermitKey(key, permits-1), opts)
	if err != nil {
		return nil, err
	}
	if lc.fair {
		return nil, fmt.Errorf("%w: semaphore %q: WithFair is for plain locks (a semaphore's waiters wait on every slot)", ErrInvalid, key)
	}
	slots := make([]string, permits)
	for i := range slots {
		slots[i] = layout.PermitKey(key, i)
	}
	return &Semaphore{c: c, key: key, permits: permits, opts: slices.Clip(opts), lc: lc, slots: slots}, nil
}

// Key returns the semaphore's key.
func (s *Semaphore) Key() string { return s.key }

// Permits returns the semaphore's permit count.
func (s *Semaphore) Permits() int { return s.permits }

// TryAcquire tries each slot once, starting at a random one, and returns the
// first permit granted. When every slot is held (or could not be taken) the
// error matches ErrNotAcquired and joins each slot's *QuorumError. No failed
// attempt leaves anything on any master.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Permit, error) {
	return s.acquire(ctx, false, nil)
}

// Acquire returns a permit, waiting until one is free or ctx ends, or for
// the WithWait bound given to NewSemaphore. It first tries each slot once,
// starting at a random one; while all are held it waits for the release of
// any slot, as Client.Acquire waits for one key, and tries the freed slot
// first; its fallback poll tries every slot, for a holder that died. Of a
// Client's waiters on one semaphore, a release wakes one (docs/design.md,
// "Waiting for a semaphore's permit"). On failure the error matches
// ErrNotAcquired, and ctx.Err() when ctx ended.
func (s *Semaphore) Acquire(ctx context.Context) (*Permit, error) {
	return s.acquire(ctx, true, nil)
}

// Do acquires a permit (as Acquire), runs fn while holding it and releases
// it when fn returns or panics, as Client.Do does with a lock: the permit is
// extended automatically while fn runs, fn's context is cancelled with the
// loss as its cause as soon as the permit is lost, and Do returns the
// acquisition error, or fn's error joined with the loss. fn's context
// carries the permit (PermitFromContext) and its lock (LockFromContext).
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	p, err := s.acquire(ctx, true, []LockOption{WithAutoExtend(0)})
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(context.WithValue(context.WithValue(ctx, lockKey{}, p.Lock), permitKey{}, p))
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-p.Lost():
			cancel(p.Err())
		case <-done:
		}
	}()
	defer func() {
		// Also on panic: free the slot for the next holder.
		close(done)
		<-watched
		relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), 2*s.c.timeout)
		_ = p.Release(relCtx)
		relCancel()
		cancel(nil)
	}()
	fnErr := fn(fnCtx)
	return errors.Join(fnErr, p.Err())
}

type permitKey struct{}

// PermitFromContext returns the permit that Semaphore.Do holds while it runs
// fn, from fn's context (or one derived from it).
func PermitFromContext(ctx context.Context) (*Permit, bool) {
	p, ok := ctx.Value(permitKey{}).(*Permit)
	return p, ok
}

// semaphoreSlot marks a slot's lock: its events name KindSemaphore, and its
// acquisitions are reported once per Semaphore call (observeSemaphore).
func semaphoreSlot() LockOption {
	return func(lc *lockConfig) { lc.eventKind, lc.quietAcquire = observe.KindSemaphore, true }
}

func (s *Semaphore) permit(l *Lock, slot int) *Permit {
	return &Permit{Lock: l, slot: slot, permits: s.permits, sem: s.key}
}

// notAcquired joins the slots' errors under one that names the semaphore.
func (s *Semaphore) notAcquired(errs []error) error {
	return &semaphoreError{key: s.key, permits: s.permits, errs: errs}
}

// semaphoreError is a Semaphore call's failure: each slot's error, on one
// line, matched by errors.Is and errors.As through Unwrap.
type semaphoreError struct {
	key     string
	permits int
	errs    []error
}

func (e *semaphoreError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redlock: semaphore %q: none of %d permits acquired", e.key, e.permits)
	for _, err := range e.errs {
		b.WriteString("; ")
		b.WriteString(strings.TrimPrefix(err.Error(), "redlock: "))
	}
	return b.String()
}

func (e *semaphoreError) Unwrap() []error { return e.errs }

// observe reports a Semaphore call's acquisition as one event, with the
// permit's lock ID so that its extensions, release and loss follow it.
func (s *Semaphore) observe(ctx context.Context, begun time.Time, attempts int, p *Permit, err error) {
	c := s.c
	e := observe.AcquireEvent{Key: s.key, Kind: observe.KindSemaphore, Outcome: acquireOutcome(err), Attempts: attempts,
		Start: begun, Wait: c.clock.Since(begun), Err: err, Quorum: c.quorum}
	if p != nil {
		e.ID = p.id
		e.Until, e.Validity = p.validity()
	}
	c.obs.OnAcquire(ctx, e)
}
