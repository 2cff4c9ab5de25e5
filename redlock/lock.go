package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/observe"
)

// Lock is a lock held on a quorum of masters, returned by the Acquire
// methods of Client (Reentrant.Lock and Client.Do hold one too). It is
// valid until Until(): past that moment another client may hold the key.
// A Lock is safe for concurrent use; releasing twice is harmless (a second
// Release, like Extend after Release, sends nothing and returns
// ErrNotHeld). A Lock no acquisition returned (nil or zero) is safe to
// call: its getters return zero values and Lost a closed channel; Extend,
// Release and Err return ErrInvalid.
type Lock struct {
	c     *Client
	key   string
	token string
	id    uint64 // names the lock in the observer's events

	acq   *round // the acquisition, which extensions and the release follow
	chain *round // the latest extension or count round, which later rounds follow
	// retaken holds a reentrant owner's rounds that took the lock again
	// (besides acq, the rounds that may put its token on a master) while
	// one of their commands may still run late; guarded by op.
	retaken    []*round
	fence      uint64        // the fencing token; 0 without WithFencing
	eventKind  string        // the kind its events name; "": its own (semaphore.go)
	ttl        time.Duration // for auto-extension
	autoPeriod time.Duration // 0: no auto-extension
	maxHold    time.Duration
	minHold    time.Duration // WithMinHold: an early release only shortens the key's TTL
	acquired   time.Time
	lost       chan struct{} // closed when the lock can no longer be trusted; made by the first Lost (lostChanLocked)
	// The acquisition's story (Waited, Attempts, Granted): set before
	// the lock is returned, read-only after.
	waited   time.Duration
	attempts int
	votes    []vote // each master's vote in the attempt that took it

	op sync.Mutex // serialises Extend and Release
	// Expiry changes whose outcome on some master is not known
	// (unsettled.go); guarded by op.
	inFlight  []time.Duration
	unsettled []unsettledRound
	// lacking has bit i set when master i answered an extension, after
	// Extend had returned, that it does not hold the token: the next
	// extension heals it (heal).
	lacking atomic.Uint64

	mu       sync.Mutex // guards the fields below
	until    time.Time
	released bool
	lostErr  error
	onLost   func(error)
	mon      *monitor // the running monitor, if any
}

// lockIDs numbers the locks of the process, for the observer's events.
var lockIDs atomic.Uint64

func newLock(c *Client, acq *round, start, until time.Time, lc *lockConfig) *Lock {
	l := &Lock{c: c, key: acq.key, token: acq.token, id: lockIDs.Add(1), acq: acq, until: until, ttl: lc.ttl,
		maxHold: lc.maxHold, minHold: lc.minHold, acquired: start, eventKind: lc.eventKind}
	if lc.auto {
		l.autoPeriod = lc.autoPeriod
	}
	return l
}

// Key returns the locked key ("" for a nil Lock).
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Token returns the random value that identifies this holder on every
// master ("" for a nil Lock).
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.token
}

// Until returns the end of the lock's validity, on the client's clock
// (with a monotonic reading when it is the real clock). Compare it with
// time.Now(), or use time.Until. It may move earlier as well as later
// (see Extend); once the lock is released or lost (Lost is closed) it is
// no later than that moment. A Lock no acquisition returned (nil or
// zero) has the zero time; the call does not panic.
func (l *Lock) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Extend sets the lock's time to live to ttl on every master that still
// holds its token, and succeeds when a quorum did within the new validity
// (start of the call + ttl − drift). An extension that fails may still run
// on masters that did not answer, so it can shorten the lock
// (docs/safety.md). It returns ErrLockLost when the lock expired or was
// lost, before the call (nothing is sent) or during it, and is never
// silently taken again; ErrNotExtended when too few masters answered while
// validity is left; ErrNotHeld after Release; ErrInvalid on a Lock no
// acquisition returned. Errors of a round that was sent are *QuorumError.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) (err error) {
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
	var r *round
	if c.obs != nil {
		defer func() {
			until, validity := l.validity()
			c.obs.OnExtend(ctx, observe.ExtendEvent{Key: l.key, Kind: l.kindName(), Outcome: extendOutcome(err), Start: start,
				Duration: c.clock.Since(start), TTL: ttl, Masters: r.results(), Err: err, Quorum: c.quorum,
				ID: l.id, Until: until, Validity: validity})
		}()
	}
	if _, err = l.checkHeld("extend", start); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return newKeyError(ErrNotExtended, l.key, "", err)
	}

	lim := l.limits()
	r, err = c.startRound(ctx, opExtend, l.key, l.token, ttl, l.follow(), l.kind(), nil)
	if err != nil {
		return err
	}
	// Later rounds follow this one on each master: on the pooled path a
	// leg may still send this PEXPIRE after Extend returned (its ctx
	// ended first), and it must not land after a later, longer one.
	l.chain = r
	t := c.collect(ctx, r)
	l.noteLateRefusals(r, &t)
	l.track(r, &t, ttl)
	now := c.clock.Now()
	held := heldTTL(lim, &t, ttl, c.quorum)
	if newUntil := start.Add(held - c.drift(held)); t.ok(c.quorum) && now.Before(newUntil) {
		if err := l.setUntil("extend", newUntil); err != nil {
			return err
		}
		l.heal(ctx, &t, newUntil)
		return nil
	}
	// Not confirmed by a quorum in time: masters that have not answered
	// may still run the command, so the validity is limited by it.
	until := l.limitUntil(start.Add(ttl - c.drift(ttl)))
	if t.no > len(c.masters)-c.quorum || !now.Before(until) {
		err := c.quorumError(t, r, ErrLockLost, t.ok(c.quorum))
		l.markLostCtx(ctx, err)
		return err
	}
	return c.quorumError(t, r, ErrNotExtended, t.ok(c.quorum))
}

// validity returns Until and the validity left now (≤ 0 once it ended),
// on the client's clock, for the observer's events.
func (l *Lock) validity() (time.Time, time.Duration) {
	u := l.Until()
	return u, u.Sub(l.c.clock.Now())
}

// setUntil sets the end of the lock's validity, after a quorum confirmed
// an expiry change, and wakes the watcher to follow it. A lock that was
// lost or released meanwhile (its watcher saw the old validity run out,
// its client closed) stays so: Until is not moved, and an error says why.
func (l *Lock) setUntil(what string, u time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostErr != nil {
		return l.lostErr
	}
	if l.released { // by a Release that waits for this round to end
		return newKeyError(ErrNotHeld, l.key, what+": the lock was released", nil)
	}
	l.until = u
	l.wakeMonitor()
	return nil
}

// limitUntil applies the rule for an expiry change that no quorum
// confirmed in time: the validity ends no later than u, the earliest
// moment at which a master that runs the command late would let the key
// expire. It returns the resulting end of validity.
func (l *Lock) limitUntil(u time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if u.Before(l.until) {
		l.until = u
		l.wakeMonitor()
	}
	return l.until
}

// follow returns the round the lock's next round must follow on each
// master (the pooled path sends them on different connections): the
// latest extension or count round, else the acquisition. The caller
// holds l.op.
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
// released or lost, or its validity ran out before start (then it is lost).
func (l *Lock) checkHeld(what string, start time.Time) (time.Time, error) {
	l.mu.Lock()
	released, until, lostErr := l.released, l.until, l.lostErr
	l.mu.Unlock()
	if released {
		return until, newKeyError(ErrNotHeld, l.key, what+": the lock was released", nil)
	}
	if lostErr != nil {
		// Lost for good (the maximum hold time, say): never taken again.
		return until, lostErr
	}
	if !start.Before(until) {
		err := newKeyError(ErrLockLost, l.key, what+": validity ran out "+start.Sub(until).String()+" ago", nil)
		l.markLost(err)
		return until, err
	}
	return until, nil
}

// Release deletes the lock on every master that still holds its token,
// and returns nil once a quorum is known not to hold it afterwards: the key
// is then free on a quorum (docs/design.md, "What a release confirms"). It
// returns ErrNotHeld when the lock was no longer held (expired, taken or
// already released), ErrNotReleased when too few masters answered to tell,
// ErrInvalid on a Lock no acquisition returned. The release is sent even
// when ctx has ended, so a deferred Release frees the lock: ctx bounds only
// the wait for the answers, the per-master timeout each master's command.
func (l *Lock) Release(ctx context.Context) (err error) {
	if err := l.check(ctx); err != nil {
		return err
	}
	c := l.c
	l.mu.Lock()
	released := l.released
	l.released = true // from now on no monitor starts
	l.mu.Unlock()
	if released {
		return newKeyError(ErrNotHeld, l.key, "already released", nil)
	}
	// Before taking op: the watchdog may be extending, under op.
	l.stopMonitor()
	l.mu.Lock()
	// Within its validity, masters that answer that they do not hold the
	// token count as freed (finalNo); past it, only those that deleted it
	// show that it was still held.
	valid := c.clock.Now().Before(l.until)
	l.endValidity() // the key may pass to another client once it is deleted
	l.mu.Unlock()
	l.op.Lock()
	defer l.op.Unlock()
	start := c.clock.Now()
	var r *round
	defer func() {
		wasLost := !l.markLostCtx(ctx, ErrReleased)
		if c.obs != nil {
			c.obs.OnRelease(ctx, observe.ReleaseEvent{Key: l.key, Kind: l.kindName(), Outcome: releaseOutcome(err), Start: start,
				Duration: c.clock.Since(start), Held: start.Sub(l.acquired), WasLost: wasLost,
				Masters: r.results(), Err: err, Quorum: c.quorum, ID: l.id})
		}
	}()
	// The TTL bounds the retries on masters that miss it (finish.go).
	k := l.kind()
	if rk := k.forRelease(); rk != nil {
		k = rk
	}
	var t tally
	if left := l.minHoldLeft(start); left > 0 {
		r, t, err = l.releaseEarly(ctx, left)
		if err != nil {
			return err
		}
	} else {
		r, err = c.startRound(ctx, opRelease, l.key, l.token, l.ttl, l.follow(), k, nil)
		if err != nil {
			return err
		}
		if valid {
			r.final = l.finalNo
		}
		r.placers.Store(l.placers())
		t = c.collect(ctx, r)
	}
	switch {
	case t.no > len(c.masters)-c.quorum || !valid && !t.ok(c.quorum):
		// Fewer than a quorum held it when the release ran, or its
		// validity had ended and no quorum deleted it.
		return c.quorumError(t, r, ErrNotHeld, false)
	case t.ok(c.quorum):
		return nil
	}
	return c.quorumError(t, r, ErrNotReleased, false)
}

// finalNo reports whether master i's answer to the lock's release (or
// count round) that it does not hold the token is final: no command of
// this lock that puts the token there can still run on that master, so
// another client can take the key there. A command given up unanswered
// may still run later, on any transport: from the buffers of a master
// frozen or busy when its connection was discarded at its deadline, and
// an Ordered transport's order holds within one connection only, not
// across the one it dialled again. So only masters that answered every
// round that places the token (the acquisition, and a reentrant owner's
// rounds taking it again), or certainly never got it, count. On an
// Ordered connection the acquisition's late answer is read before the
// release's, so a master that answered late still counts. The caller
// holds op.
func (l *Lock) finalNo(i int) bool {
	if !l.acq.settledAt(i) {
		return false
	}
	for _, r := range l.retaken {
		if !r.settledAt(i) {
			return false
		}
	}
	return true
}

// placers returns the rounds that may have put the lock's token on a
// master: where none did, its release needs no retry. The caller holds op.
func (l *Lock) placers() *[]*round {
	rs := append([]*round{l.acq}, l.retaken...)
	return &rs
}

// noteRetaken records r, a reentrant owner's round that took the lock
// again, for finalNo, and forgets the earlier ones settled on every
// master. The caller holds op.
func (l *Lock) noteRetaken(r *round) {
	kept := l.retaken[:0]
	for _, o := range l.retaken {
		if !o.settledEverywhere() {
			kept = append(kept, o)
		}
	}
	clear(l.retaken[len(kept):])
	kept = append(kept, r)
	l.retaken = kept
}
