package redlock

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/quorumlock/quorumlock/internal/waker"
)

// Acquire takes the lock on key, retrying until it succeeds or ctx ends,
// or, with WithWait(d), until d is spent (no bound by default: give ctx a
// deadline or use WithWait; TryAcquire tries once). Between attempts it
// waits for a master to announce the key's release, with a jittered
// backoff and a fallback poll as bounds; a woken attempt asks the key's
// pilot first (docs/design.md, "Waiting without polling"). On failure the
// error matches ErrNotAcquired, and ctx.Err() when ctx ended; it is a
// *QuorumError that tells what each master answered in the last attempt
// that some master answered (ctx may end an attempt before any did). No
// failed attempt leaves the key on any master.
func (c *Client) Acquire(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquirePlain(ctx, key, opts, false)
}

// TryAcquire makes exactly one attempt to take the lock on key. On failure
// the error matches ErrNotAcquired (see Acquire); a fair waiter
// (WithFair) leaves the queue again, as Acquire's does when it gives up.
// A WithWait among opts is ignored, as by every TryAcquire form.
func (c *Client) TryAcquire(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquirePlain(ctx, key, opts, true)
}

// acquirePlain is Acquire, or with once TryAcquire: one attempt, after
// which acquire's clean-up leaves the queue.
func (c *Client) acquirePlain(ctx context.Context, key string, opts []LockOption, once bool) (*Lock, error) {
	called := c.callStart()
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	lc, err := c.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	if once {
		lc.once()
	}
	return c.acquire(ctx, called, key, &lc, c.plainKind(key, &lc))
}

// acquire is Acquire for a lock of any kind. begun is when the caller's
// call started, before the client's checks (which on its first call
// identify the masters, waiting up to a per-master timeout): the wait
// bound, Lock.Waited and the observer count from it. Zero: now.
func (c *Client) acquire(ctx context.Context, begun time.Time, key string, lc *lockConfig, k kind) (got *Lock, err error) {
	k = withHolderMeta(k, key, lc)
	if begun.IsZero() {
		begun = c.clock.Now()
	}
	giveUp := begun.Add(lc.wait) // with lc.waitSet
	var wt *waker.Waiting        // set once the first attempt failed
	var last *round              // the latest attempt
	tries := 0
	// Read before the first attempt: whether a release between its
	// refusal and the registration could go unheard (waker.Waiting.Recheck).
	mark := c.waker.Mark(key, k.keys)
	if c.obs != nil && !lc.quietAcquire {
		defer func() { c.observeAcquire(ctx, key, kindName(k, lc.fencing), begun, tries, last, got, err) }()
	}
	defer func() {
		if wt != nil {
			wt.Stop(err == nil)
		}
		if k.leaves() && err != nil && last != nil {
			// Give the place in the queue (or the writer's intent) up now
			// rather than at its expiry: in the background, each master
			// bounded, after the latest attempt's command on that master.
			_, _ = c.startRound(context.Background(), opLeave, key, "", 0, last, k, nil)
		}
	}()
	lead := -1             // the master the next attempt asks first (a woken waiter's, lead.go), or none
	var waitFrom time.Time // when this call began to wait (real time), for Waiting.Woken's delay
	hints := 0             // attempts made at a hinted moment since the last wake (expiry.go)
	var told *QuorumError  // the latest attempt's error that some master answered
	for attempt := 0; ; attempt++ {
		l, r, err := c.attempt(ctx, key, lc, k, lead)
		lead = -1
		if wt != nil {
			wt.Tried(err) // a woken attempt's end (waker.Waiting.Pause)
		}
		if r != nil {
			last = r
			tries++
		}
		if err == nil {
			l.waited, l.attempts = c.clock.Since(begun), tries
			return l, nil
		}
		if !isQuorumError(err) {
			return l, err
		}
		if cerr := ctx.Err(); cerr != nil {
			// ctx ended after the attempt's round was counted: the error
			// matches ctx.Err() all the same, as documented. An attempt
			// that ctx cut before any master answered tells nothing: the
			// attempt before it says why the lock was not had.
			var qe *QuorumError
			if asQuorumError(err, &qe) && qe.unheard() && told != nil {
				qe = told
				err = told
			}
			if qe != nil && qe.ctxErr == nil {
				qe.ctxErr = cerr
			}
			return nil, err
		}
		var qe *QuorumError
		if asQuorumError(err, &qe) && !qe.unheard() {
			told = qe
		}
		// The last attempt is made at the wait bound itself: a delay
		// that would pass it is cut short.
		left := time.Duration(math.MaxInt64)
		if lc.waitSet {
			if left = giveUp.Sub(c.clock.Now()); left <= 0 {
				return nil, err
			}
		}
		if wt == nil {
			if c.beforeWait != nil {
				c.beforeWait()
			}
			waitFrom = time.Now()
			wt = c.wait(k.keys(key), mark, k)
			if pk, ok := k.(plainKind); ok {
				// Its next attempts learn when the holder's key runs out,
				// and with a line, join it.
				pk.waiting = true
				if pk.handOver {
					pk.line, pk.entryMS, pk.arrival = c.jit.UUID(), c.entryTTL(lc).Milliseconds(), c.lineArrival()
					wt.InLine(pk.line)
				}
				k = pk
			}
		} else {
			c.waker.Revive()
		}
		// A refused waiting attempt said when the key runs out: try again
		// then, if sooner (expiry.go). Each such attempt refused again
		// doubles the least delay a hint may give.
		in, told := last.freeIn(c.quorum, time.Now())
		delay, hint := hinted(c.jit, c.delay(wt, lc, attempt, k.leaves(), err), in, told, hintFloor(lc, hints))
		delay = min(delay, left)
		switch why, next := c.pause(ctx, wt, key, k, delay, waitFrom); why {
		case waker.ResumeCtx:
			var qe *QuorumError
			if asQuorumError(err, &qe) {
				qe.ctxErr = ctx.Err()
			}
			return nil, err
		case waker.ResumeReleased:
			// The backoff starts over: try again now, and should that
			// fail, soon again.
			attempt, lead, hints = -1, next, 0
		case waker.ResumeDelay:
			if hint {
				hints++
			}
		}
	}
}

// attempt makes one acquisition attempt of a lock of kind k, with the
// token k gives (a fresh one, or a reentrant lock's owner).
//
// With lead ≥ 0, master lead is asked first and the others only once it
// granted (a woken waiter, lead.go).
func (c *Client) attempt(ctx context.Context, key string, lc *lockConfig, k kind, lead int) (*Lock, *round, error) {
	ttl := lc.ttl
	if err := ctx.Err(); err != nil {
		return nil, nil, &QuorumError{Op: "acquire", Key: key, Masters: len(c.masters), Quorum: c.quorum,
			sentinel: ErrNotAcquired, ctxErr: err, addrs: c.addrs}
	}
	k = kindForAttempt(k)
	token := k.token(c.jit)
	start := c.clock.Now()
	var fence *fencing
	if lc.fencing {
		fence = &fencing{counter: FenceKey(key)}
	}
	r, err := c.startLed(ctx, opAcquire, key, token, ttl, nil, k, fence, lead)
	if err != nil {
		return nil, nil, err
	}
	t := c.collect(ctx, r)
	// dup: the round counted its grants by the masters' identities
	// (ident.Gate), and the masters were found to include one server twice
	// meanwhile, or Close stopped the probe (which then identified
	// nothing more): the attempt fails with that error. A round that failed while the
	// first probe ran waits for it (it started before the round, so that
	// is within the round's budget and ident.ProbeGrace) to tell the duplicate
	// on this call; one that succeeded waited already.
	var dup error
	if t.gate != nil {
		t.uncounted = t.gate.Uncounted(t.granted)
		if t.ctxErr == nil {
			dup = c.identified(ctx)
		} else {
			dup = c.ident.Dup()
		}
		if dup == nil && c.ident.Stopped() {
			dup = c.closedErr("acquire", key)
		}
		if t.lost > 0 {
			c.reprobeGranted(t.granted)
		}
	}
	if t.ok(c.quorum) {
		// A led round's last legs may still be on their way to be sent
		// (the lead's answer readies them one by one): no later command
		// of the holder (a fence commit, its release) may reach their
		// masters first, on a transport that keeps the order of sending.
		r.sentLed.Wait()
	}
	validity := ttl - c.clock.Since(start) - c.drift(ttl)
	// failed describes a failure after the acquisition's own round: the
	// fence commit's.
	var failed *QuorumError
	var token64 uint64
	if lc.fencing && t.ok(c.quorum) && t.ctxErr == nil && validity > 0 && dup == nil {
		ct, cr, ft, err := c.commitFence(ctx, r, &t, ttl)
		if err != nil {
			// The commit could not start (the client is closing): undo
			// the acquisition like any failed attempt.
			r.decide(true)
			return nil, r, err
		}
		validity = ttl - c.clock.Since(start) - c.drift(ttl)
		if !ct.ok(c.quorum) || ct.ctxErr != nil || validity <= 0 {
			failed = c.quorumError(ct, cr, ErrNotAcquired, ct.ok(c.quorum) && ct.ctxErr == nil)
			t.ctxErr = ct.ctxErr
		}
		token64 = ft
	}
	if t.ok(c.quorum) && t.ctxErr == nil && validity > 0 && failed == nil && dup == nil {
		r.decide(false)
		l := newLock(c, r, start, start.Add(ttl-c.drift(ttl)), lc)
		l.fence = token64
		l.votes = t.votes
		if k.renews() {
			// A reentrant or read-write acquisition sets the expiry of a
			// hold that exists: late, it may shorten a later extension.
			l.track(r, &t, ttl)
		}
		if lc.auto {
			l.startMonitor()
		}
		return l, r, nil
	}
	r.decide(true)
	// Wait for the rollback on the masters that granted so far (one round
	// trip), so that a failed attempt leaves no key where it was granted,
	// but not past ctx: the rollback then goes on in the background.
	// Masters that failed or have not answered yet roll back in the
	// background, each right after its own SET, bounded by the per-master
	// timeout (on an Ordered transport, by its own bound: the stall bound
	// of a pipelined connection).
	if t.ctxErr == nil {
		rolled := r.legsEnded(t.votes)
		var bound <-chan time.Time
		if c.someOrdered {
			// An Ordered transport keeps a rollback behind a slow SET
			// past any deadline: wait one per-master timeout at most.
			wait := c.clock.NewTimer(c.timeout)
			defer wait.Stop()
			bound = wait.C()
		}
		select {
		case <-rolled:
		case <-bound:
		case <-ctx.Done():
		case <-c.closing: // Close bounds what is left
		}
	}
	if dup != nil {
		return nil, r, dup
	}
	if failed != nil {
		return nil, r, failed
	}
	return nil, r, c.quorumError(t, r, ErrNotAcquired, t.ok(c.quorum) && t.ctxErr == nil)
}

func isQuorumError(err error) bool {
	var qe *QuorumError
	return asQuorumError(err, &qe)
}

func asQuorumError(err error, target **QuorumError) bool {
	return errors.As(err, target)
}
