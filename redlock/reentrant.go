package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/quorumlock/quorumlock/internal/jitter"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/observe"
)

// Reentrant locks: one Redis hash per key holding the owner, its hold
// count and the hold's id (internal/scripts/reentrant.lua). The owner is
// the token of every hold, so its rounds supersede each other
// (internal/finish) and none may run late; the hold id, new for every
// attempt at a first hold, keeps a command of an older hold that a
// master runs late anyway from ending or changing a newer one
// (docs/design.md, "Reentrant holds").

// Reentrant is a reentrant lock on one key for one owner: the owner may
// take it again while holding it, and must release it as many times. Go
// has no thread identity, so the owner is explicit: goroutines that share
// a Reentrant act as one owner. The lock lives on each master as a hash
// holding the owner and its hold count; counts are set, never
// incremented, so a master that missed an update is put right by the next
// one. Another owner (another Reentrant with another owner ID) is refused
// while it is held. A Reentrant is safe for concurrent use: its Acquire,
// TryAcquire and Release calls run one at a time (a call waiting for
// another honours its ctx).
type Reentrant struct {
	c     *Client
	key   string
	owner string
	lc    lockConfig

	// op holds a value while an Acquire, TryAcquire or Release runs: they
	// take turns, and one waiting for its turn honours its ctx.
	op chan struct{}

	// holds names this Reentrant's holds: each attempt at a first hold
	// gets the id holds.next() (see reentrantKind).
	holds *holdIDs

	mu    sync.Mutex // guards lock and count, which only a call holding op changes
	lock  *Lock      // while held
	count int64
}

// NewReentrant returns a reentrant lock on key for owner (a random owner
// when empty). It sends nothing; opts apply to every acquisition. An owner
// ID belongs to one Reentrant at a time: every hold has an id of its own,
// and another Reentrant with the same owner (in this Client or another,
// or after a restart) is refused, as another owner would be, on a master
// that still has this one's hold, until that hold is released there or
// expires.
func (c *Client) NewReentrant(key, owner string, opts ...LockOption) (*Reentrant, error) {
	if err := c.valid(); err != nil {
		return nil, err
	}
	lc, err := c.kindConfig("reentrant", key, opts)
	if err != nil {
		return nil, err
	}
	if owner == "" {
		owner = c.jit.UUID()
	}
	return &Reentrant{c: c, key: key, owner: owner, lc: lc, op: make(chan struct{}, 1), holds: newHoldIDs(c.jit)}, nil
}

// Key returns the locked key ("" for a nil Reentrant).
func (r *Reentrant) Key() string {
	if r == nil {
		return ""
	}
	return r.key
}

// Owner returns the owner ID ("" for a nil Reentrant).
func (r *Reentrant) Owner() string {
	if r == nil {
		return ""
	}
	return r.owner
}

// Count returns how many holds the owner has not released.
func (r *Reentrant) Count() int64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Lock returns the underlying lock while held (for Until, Lost, Err and
// Extend), else nil.
func (r *Reentrant) Lock() *Lock {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lock
}

// Acquire takes the lock, or takes it once more when the owner holds it
// already: then it succeeds at once (one round, no waiting), sets the
// hold count on the masters and renews the lock's validity for its TTL.
// Taking it again sets the TTL like Lock.Extend: when no quorum confirms
// it in time the lock's validity may shrink, and it is lost (ErrLockLost)
// when none is left. The first hold waits like Client.Acquire: until it
// gets the lock or ctx ends, or for the WithWait bound given to
// NewReentrant. On failure the error matches ErrNotAcquired.
func (r *Reentrant) Acquire(ctx context.Context) error {
	return r.acquire(ctx, false)
}

// TryAcquire is Acquire with exactly one attempt at a first hold (taking
// the lock again is one round anyway), as sync.Mutex.TryLock: it fails,
// with an error matching ErrNotAcquired, when another owner holds the
// lock, and also, without sending anything, while another call on this
// Reentrant is under way.
func (r *Reentrant) TryAcquire(ctx context.Context) error {
	return r.acquire(ctx, true)
}

func (r *Reentrant) acquire(ctx context.Context, once bool) error {
	if err := r.check(ctx); err != nil {
		return err
	}
	// A call that talks to the masters: the identity check at first
	// contact (internal/ident), and from then on the duplicate-master error.
	if err := r.c.identify(); err != nil {
		return err
	}
	if once {
		select {
		case r.op <- struct{}{}:
		default:
			return newKeyError(ErrNotAcquired, r.key, "(another call of owner "+strconv.Quote(r.owner)+" is under way)", nil)
		}
	} else if err := r.turn(ctx); err != nil {
		return newKeyError(ErrNotAcquired, r.key, "", err)
	}
	defer func() { <-r.op }()
	held, count := r.held()
	var lim []time.Duration // the lost hold's expiry changes still in flight
	if held != nil {
		if err := held.Err(); err != nil {
			// Lost: start over.
			lim = held.limitsBeforeNext()
			r.set(nil, 0)
			held = nil
		}
	}
	if held == nil {
		lc := r.lc
		if once {
			lc.once()
		}
		l, err := r.c.acquire(ctx, time.Time{}, r.key, &lc, &reentrantKind{owner: r.owner, count: 1, ids: r.holds})
		if err != nil {
			return err
		}
		if err := l.inherit(lim); err != nil {
			_ = l.Release(context.WithoutCancel(ctx))
			return err
		}
		r.set(l, 1)
		return nil
	}
	if err := held.reenter(ctx, count+1); err != nil {
		return err
	}
	r.set(held, count+1)
	return nil
}

// Release gives one hold back. The last one deletes the lock on the
// masters and wakes its waiters; the others set the count there. It
// returns an error matching ErrNotHeld when the owner holds nothing, and
// one matching ErrNotReleased and ctx.Err() when ctx ended while another
// call on this Reentrant ran (nothing was sent then).
func (r *Reentrant) Release(ctx context.Context) error {
	if err := r.check(ctx); err != nil {
		return err
	}
	if err := r.turn(ctx); err != nil {
		return newKeyError(ErrNotReleased, r.key, "", err)
	}
	defer func() { <-r.op }()
	held, count := r.held()
	if held == nil {
		return fmt.Errorf("%w: release %q: owner %q holds no lock", ErrNotHeld, r.key, r.owner)
	}
	if count > 1 {
		if err := held.setCount(ctx, count-1); err != nil {
			return err
		}
		r.set(held, count-1)
		return nil
	}
	r.set(nil, 0)
	return held.Release(ctx)
}

// turn waits until no other call on r runs, or ctx ends.
func (r *Reentrant) turn(ctx context.Context) error {
	select {
	case r.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Reentrant) held() (*Lock, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lock, r.count
}

func (r *Reentrant) set(l *Lock, count int64) {
	r.mu.Lock()
	r.lock, r.count = l, count
	r.mu.Unlock()
}

// check rejects a nil or zero Reentrant and a nil context.
func (r *Reentrant) check(ctx context.Context) error {
	if r == nil || r.c == nil {
		return fmt.Errorf("%w: this Reentrant was not made by Client.NewReentrant", ErrInvalid)
	}
	return checkCtx(ctx)
}

// reenter takes a held reentrant lock once more: the masters set the
// count to n and renew the TTL; with a quorum in time the validity is
// renewed, and without one it is limited as after a failed Extend.
func (l *Lock) reenter(ctx context.Context, n int64) error {
	return l.countRound(ctx, opAcquire, n, "acquire again")
}

// setCount gives back holds of a reentrant lock: the masters set the count
// to n (n ≥ 1), keeping the TTL.
func (l *Lock) setCount(ctx context.Context, n int64) error {
	return l.countRound(ctx, opRelease, n, "release")
}

func (l *Lock) countRound(ctx context.Context, op opKind, n int64, what string) (err error) {
	c := l.c
	l.op.Lock()
	defer l.op.Unlock()
	start := c.clock.Now()
	var r *round
	if c.obs != nil && op == opAcquire {
		// Taking it again renews the TTL as an extension does: the
		// observer hears it as one (its validity, for a gauge of the
		// locks held, and its outcome; not taken again in time, the lock
		// is still held until its validity ends: ExtendNotExtended).
		defer func() {
			outcome := extendOutcome(err)
			if errors.Is(err, ErrNotAcquired) {
				outcome = observe.ExtendNotExtended
			}
			until, validity := l.validity()
			c.obs.OnExtend(ctx, observe.ExtendEvent{Key: l.key, Kind: l.kindName(), Outcome: outcome, Start: start,
				Duration: c.clock.Since(start), TTL: l.ttl, Masters: r.results(), Err: err, Quorum: c.quorum,
				ID: l.id, Until: until, Validity: validity})
		}()
	}
	until, err := l.checkHeld(what, start)
	if err != nil {
		return err
	}
	var lim []time.Duration
	if op == opAcquire {
		lim = l.limits()
	}
	// Counts are set, so the rounds must reach each master in order.
	r, err = c.startRound(ctx, op, l.key, l.token, l.ttl, l.follow(), mapKind(l.kind(), func(k kind) kind { return k.(*reentrantKind).withCount(n) }), nil)
	if err != nil {
		return err
	}
	l.chain = r
	if op == opAcquire {
		l.noteRetaken(r)
	} else if now := c.clock.Now(); now.Before(until) {
		// A count given back: a master that does not hold the owner
		// has no count to set (see Release).
		r.final = l.finalNo
	}
	t := c.collect(ctx, r)
	r.decide(false) // nothing to undo: the lock stays held either way
	now := c.clock.Now()
	if op == opAcquire {
		// Taking it again sets the TTL: as an extension (see Extend).
		l.track(r, &t, l.ttl)
		held := heldTTL(lim, &t, l.ttl, c.quorum)
		if newUntil := start.Add(held - c.drift(held)); t.ok(c.quorum) && now.Before(newUntil) {
			return l.setUntil(what, newUntil)
		}
		until = l.limitUntil(start.Add(l.ttl - c.drift(l.ttl)))
	} else if t.ok(c.quorum) && t.no <= len(c.masters)-c.quorum {
		// A count set where the owner holds it, the expiry untouched.
		return nil
	}
	if t.no > len(c.masters)-c.quorum || !now.Before(until) {
		err := c.quorumError(t, r, ErrLockLost, t.ok(c.quorum))
		l.markLost(err)
		return err
	}
	sentinel := ErrNotReleased
	if op == opAcquire {
		sentinel = ErrNotAcquired
	}
	return c.quorumError(t, r, sentinel, false)
}

// reentrantKind is a reentrant owner's lock: the owner is its token, and
// each round sets the hold count. Every attempt at a first hold has an id
// of its own (forAttempt), which the rounds of the hold it grants keep:
// the script acts only on the hold with that id, so that an owner's
// older release, rollback or re-entry that a master runs late cannot end
// or change a newer hold of the same owner (docs/design.md, "Reentrant
// holds").
type reentrantKind struct {
	baseKind
	owner     string   // the owner, which is also the token
	ids       *holdIDs // where an attempt's hold id comes from
	hold      string   // the hold's id: its first attempt's
	count     int64    // the hold count to set
	releaseID string   // the last release (count 0): the id it is announced by
}

var (
	_ kind        = (*reentrantKind)(nil)
	_ attemptKind = (*reentrantKind)(nil)
)

func (k *reentrantKind) command(r *round, op opKind, dst []any) (*scripts.Script, string, []any) {
	key, tok := r.key, r.token
	switch op {
	case opAcquire:
		return scripts.Reentrant, "", append(dst, key, "acquire", tok, r.ttlMS, k.count, k.hold)
	case opExtend:
		return scripts.Reentrant, "", append(dst, key, "extend", tok, r.ttlMS, k.hold)
	case opRelease:
		ch := ""
		if k.count == 0 {
			ch = wakeChannel(key)
		}
		return scripts.Reentrant, "", append(dst, key, "release", tok, k.count, ch, k.releaseID, k.hold)
	default: // opRollback of a first hold: nothing was held before
		return scripts.Reentrant, "", append(dst, key, "release", tok, 0, "", "", k.hold)
	}
}

// forAttempt returns k with a new hold id, for one attempt at a first
// hold.
func (k *reentrantKind) forAttempt() kind {
	v := *k
	v.hold = k.ids.next()
	return &v
}

// holdIDs gives the attempts of one Reentrant their hold ids: the
// Reentrant's random name, ":", and a count of its attempts in decimal.
// The script lets an attempt take over an older hold of the same
// Reentrant (the same name, a smaller count: one the Reentrant no longer
// holds), and refuses it a newer one or another Reentrant's. Safe for
// concurrent use.
type holdIDs struct {
	name string
	n    atomic.Uint64
}

func newHoldIDs(j *jitter.Rand) *holdIDs {
	return &holdIDs{name: strconv.FormatUint(j.Uint64(), 36)}
}

func (h *holdIDs) next() string {
	return h.name + ":" + strconv.FormatUint(h.n.Add(1), 10)
}

func (k *reentrantKind) token(*jitter.Rand) string { return k.owner }
func (k *reentrantKind) oneToken() bool            { return true }
func (k *reentrantKind) renews() bool              { return true }
func (k *reentrantKind) partial() bool             { return k.count != 0 }
func (k *reentrantKind) forRelease() kind          { return k.withCount(0) }

// withCount returns k with the count set to n; the last release (n = 0)
// gets an id of its own to be announced by, since every release of one
// owner has the same token.
func (k *reentrantKind) withCount(n int64) *reentrantKind {
	v := *k
	v.count = n
	if n == 0 {
		v.releaseID = uuid.NewString()[:8]
	}
	return &v
}
