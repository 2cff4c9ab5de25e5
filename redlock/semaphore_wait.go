package redlock

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/quorumlock/quorumlock/internal/wake"
	"github.com/quorumlock/quorumlock/internal/waker"
)

// Waiting for a semaphore's permit.
//
// An Acquire that found every slot held waits as one waiter registered on
// every slot's key, all on one channel (slotWaiter), never as one waiter
// per slot: the waker keeps it in the queue of each slot's key of its
// Client, as a single-key waiter. A release of slot i therefore wakes, in
// each client, one waiter of the semaphore — the one of slot i's queue
// that has waited longest — and that waiter tries slot i alone, led by the
// slot's pilot like a woken lock waiter (lead.go). Told of several slots
// at once, it keeps one and hands the others on at once to the next waiter
// of each slot's queue, so that no freed slot waits for its attempt; a
// waiter that leaves without having tried a slot it was woken for hands
// that slot on too (waker.Waiting.StopAt), and one whose attempt failed
// after a notice of the slot woke another waiter of the Client meanwhile
// wakes the next waiter of that slot (waker.Waiting.Tried): its grant at
// the slot's pilot, undone by no notice, may have refused the other. Its
// timer — the backoff, then the fallback poll — tries every slot from a
// random one: a holder that vanished frees its slot at its TTL without a
// notice, and a notice may be lost.

// slotsKind is a plain lock waited for on every slot's key: its keys are
// what waker.Waker.Mark asks of a semaphore's waiter.
type slotsKind struct {
	plainKind
	slots []string
}

func (k slotsKind) keys(string) []string { return k.slots }

// acquire is TryAcquire (wait false) and Acquire, with pre given before the
// semaphore's options.
func (s *Semaphore) acquire(ctx context.Context, wait bool, pre []LockOption) (p *Permit, err error) {
	c := s.c
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	begun := c.clock.Now()
	tries := 0
	if c.obs != nil {
		defer func() { s.observe(ctx, begun, tries, p, err) }()
	}
	opts := make([]LockOption, 0, len(pre)+len(s.opts)+1)
	opts = append(append(append(opts, pre...), s.opts...), semaphoreSlot())
	lc, err := c.lockConfig(s.slots[s.permits-1], opts)
	if err != nil {
		return nil, err
	}
	// Read before the first attempt: whether a release between its
	// refusal and the registration could go unheard (waker.Waiting.Recheck).
	var m waker.Mark
	if wait {
		m = c.waker.Mark("", slotsKind{slots: s.slots}.keys)
	}
	defer func() {
		if p != nil {
			p.waited, p.attempts = c.clock.Since(begun), tries
		}
	}()
	p, errs := s.pass(ctx, &lc, &tries)
	if p != nil {
		return p, nil
	}
	if !wait || ctx.Err() != nil || !errors.Is(errs[len(errs)-1], ErrNotAcquired) {
		return nil, s.notAcquired(errs)
	}
	return s.wait(ctx, &lc, m, begun, errs, &tries)
}

// pass tries each slot once from a random one, and stops at the first
// grant or at an error other than a refusal.
func (s *Semaphore) pass(ctx context.Context, lc *lockConfig, tries *int) (*Permit, []error) {
	n := len(s.slots)
	start := s.c.jit.IntN(n)
	var errs []error
	for j := 0; j < n; j++ {
		i := (start + j) % n
		p, err := s.try(ctx, lc, i, -1, tries)
		if err == nil {
			return p, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, ErrNotAcquired) || ctx.Err() != nil {
			break
		}
	}
	return nil, errs
}

// try makes one attempt on slot i, asking master lead first (≥ 0).
func (s *Semaphore) try(ctx context.Context, lc *lockConfig, i, lead int, tries *int) (*Permit, error) {
	key := s.slots[i]
	l, r, err := s.c.attempt(ctx, key, lc, withHolderMeta(plainKind{}, key, lc), lead)
	if r != nil {
		*tries++
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			var qe *QuorumError
			if asQuorumError(err, &qe) && qe.ctxErr == nil {
				qe.ctxErr = cerr
			}
		}
		return nil, err
	}
	return s.permit(l, i), nil
}

// wait is Acquire after a first pass refused by every slot (errs): it
// waits for a release of any slot (see above) until a permit is granted,
// ctx ends or the wait bound passes.
func (s *Semaphore) wait(ctx context.Context, lc *lockConfig, m waker.Mark, begun time.Time, errs []error, tries *int) (*Permit, error) {
	c := s.c
	giveUp := begun.Add(lc.wait) // with lc.waitSet
	if c.beforeWait != nil {
		c.beforeWait()
	}
	wt := s.register(m)
	got := -1
	defer func() { s.unregister(wt, got) }()
	waitFrom := time.Now()
	for attempt := 0; ; {
		left := time.Duration(math.MaxInt64)
		if lc.waitSet {
			if left = giveUp.Sub(c.clock.Now()); left <= 0 {
				return nil, s.notAcquired(errs)
			}
		}
		delay := min(c.delay(wt, lc, attempt, false, errs[len(errs)-1]), left)
		why := s.pause(ctx, wt, delay)
		var p *Permit
		switch why {
		case waker.ResumeCtx:
			var qe *QuorumError
			if asQuorumError(errs[len(errs)-1], &qe) {
				qe.ctxErr = ctx.Err()
			}
			return nil, s.notAcquired(errs)
		case waker.ResumeReleased:
			i := s.wokenSlot(wt)
			if i < 0 {
				continue // handed on meanwhile
			}
			lead := wt.One(i).Woken(ctx, s.slots[i], false, waitFrom)
			var err error
			p, err = s.try(ctx, lc, i, lead, tries)
			wt.Tried(err)
			if err != nil {
				errs = []error{err}
			}
			// Should it have failed, try again soon: the notice may have
			// come before a quorum of masters ran the release.
			attempt = 0
		default:
			c.waker.Revive()
			p, errs = s.pass(ctx, lc, tries)
			attempt++
		}
		if p != nil {
			got = p.slot
			return p, nil
		}
		if err := errs[len(errs)-1]; !errors.Is(err, ErrNotAcquired) || ctx.Err() != nil {
			return nil, s.notAcquired(errs)
		}
	}
}

// register makes the waiter of one Acquire: registered on every slot's
// key, as a waiter of that key alone, all on one channel. m is the mark
// read before the first attempt (waker.Waiting.Recheck).
func (s *Semaphore) register(m waker.Mark) *waker.Waiting {
	return s.c.waker.Wait(s.slots, m, wake.Plain, 0)
}

// unregister removes the waiter from every slot's queue; got is the slot
// it took, or -1. The notice of a slot it was woken for and has not tried
// goes to the next waiter of that slot (waker.Waiting.StopAt).
func (s *Semaphore) unregister(wt *waker.Waiting, got int) {
	wt.StopAt(got)
}

// wokenSlot returns a slot the waiter was woken for and takes its notice,
// or -1 when none is left; the others it hands on (wake.Table.TakeOne).
// The attempt on that slot begins (waker.Waiting.TakeOne): its end is
// told with waker.Waiting.Tried.
func (s *Semaphore) wokenSlot(wt *waker.Waiting) int {
	return wt.TakeOne(s.c.jit.IntN)
}

// pause is Client.pause for a semaphore's waiter: it ends at the first of
// its delay, the recheck of a new waiter, a release of any slot
// (waker.ResumeReleased: wokenSlot tells which), Close and ctx.
func (s *Semaphore) pause(ctx context.Context, wt *waker.Waiting, delay time.Duration) waker.Resume {
	return wt.WaitOut(ctx, false, delay)
}
