package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/layout"
)

// KindSemaphore names a semaphore's permits in events (Client.NewSemaphore).
const KindSemaphore = "semaphore"

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
// (who holds it, for redlock status), WithBackoff and WithWait (a bound on
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
	return &Semaphore{c: c, key: key, permits: permits, opts: slices.Clip(opts), lc: lc}, nil
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
// starting at a random one; while all are held it waits on every slot at
// once, as Client.Acquire waits on one key (woken by any slot's release,
// with its fallback poll for a holder that died), and takes the first slot
// granted; a slot granted at the same moment is released again at once.
// On failure the error matches ErrNotAcquired, and ctx.Err() when ctx ended.
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
	return func(lc *lockConfig) { lc.eventKind, lc.quietAcquire = KindSemaphore, true }
}

// acquire is TryAcquire (wait false) and Acquire, with pre given before the
// semaphore's options.
func (s *Semaphore) acquire(ctx context.Context, wait bool, pre []LockOption) (p *Permit, err error) {
	c := s.c
	if err := c.check(ctx); err != nil {
		return nil, c.identWaitFailed(err, s.key)
	}
	begun := c.clock.Now()
	attempts := 0
	if c.obs != nil {
		defer func() { s.observe(ctx, begun, attempts, p, err) }()
	}
	opts := make([]LockOption, 0, len(pre)+len(s.opts)+2)
	opts = append(append(append(opts, pre...), s.opts...), semaphoreSlot())
	p, errs := s.pass(ctx, opts, &attempts)
	if p != nil {
		return p, nil
	}
	if !wait || ctx.Err() != nil || !errors.Is(errs[len(errs)-1], ErrNotAcquired) {
		return nil, s.notAcquired(errs)
	}
	if s.lc.waitSet {
		left := s.lc.wait - c.clock.Since(begun)
		if left <= 0 {
			return nil, s.notAcquired(errs)
		}
		opts = append(opts, WithWait(left))
	}
	return s.waitAll(ctx, opts, &attempts)
}

// pass tries each slot once from a random one, and stops at the first
// grant or at an error other than a refusal.
func (s *Semaphore) pass(ctx context.Context, opts []LockOption, attempts *int) (*Permit, []error) {
	start := s.c.jit.intN(s.permits)
	var errs []error
	for j := 0; j < s.permits; j++ {
		i := (start + j) % s.permits
		l, err := s.c.TryAcquire(ctx, layout.PermitKey(s.key, i), opts...)
		*attempts++
		if err == nil {
			return s.permit(l, i), nil
		}
		errs = append(errs, err)
		if !errors.Is(err, ErrNotAcquired) || ctx.Err() != nil {
			break
		}
	}
	return nil, errs
}

// waitAll waits on every slot at once, one Acquire each, and keeps the
// first grant; a later one is released again.
func (s *Semaphore) waitAll(ctx context.Context, opts []LockOption, attempts *int) (*Permit, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		slot int
		l    *Lock
		err  error
	}
	results := make(chan result, s.permits)
	for i := 0; i < s.permits; i++ {
		go func(i int) {
			l, err := s.c.Acquire(wctx, layout.PermitKey(s.key, i), opts...)
			results <- result{i, l, err}
		}(i)
	}
	var errs []error
	for n := 0; n < s.permits; n++ {
		r := <-results
		if r.err != nil {
			*attempts++
			errs = append(errs, r.err)
			continue
		}
		*attempts += r.l.Attempts()
		cancel()
		// The other slots' acquisitions end at the cancel, a cancelled
		// attempt after undoing itself: do not hold the permit up for
		// that. A slot granted meanwhile is released again.
		rest := s.permits - n - 1
		drain := func() {
			for ; rest > 0; rest-- {
				if r := <-results; r.err == nil {
					relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), 2*s.c.timeout)
					_ = r.l.Release(relCtx)
					relCancel()
				}
			}
		}
		if s.c.addWorker() {
			go func() {
				defer s.c.workers.Done()
				drain()
			}()
		} else {
			drain()
		}
		return s.permit(r.l, r.slot), nil
	}
	return nil, s.notAcquired(errs)
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
	e := AcquireEvent{Key: s.key, Kind: KindSemaphore, Outcome: acquireOutcome(err), Attempts: attempts,
		Start: begun, Wait: c.clock.Since(begun), Err: err, Quorum: c.quorum}
	if p != nil {
		e.ID = p.id
		e.Until, e.Validity = p.validity()
	}
	c.obs.OnAcquire(ctx, e)
}
