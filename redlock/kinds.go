package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// Lock kinds beyond the plain lock: reentrant, read-write and multi-key.
// Each is a variant of a round's commands (its own script on every
// master); everything else — the quorum, validity, rollback of a failed
// attempt, extension, auto-extension, loss and wake-up — is the plain
// lock's machinery.

type lockKind uint8

const (
	kindReentrant lockKind = iota + 1
	kindRead
	kindWrite
	kindMulti
)

// variant is what a lock of another kind sends.
type variant struct {
	kind     lockKind
	owner    string   // reentrant: the owner, which is also the token
	count    int64    // reentrant: the hold count to set
	release  string   // reentrant, last release: the id it is announced by
	writer   string   // write: the waiter's id, stable across its attempts
	intentMS int64    // write: how long a waiting writer's intent lasts
	keys     []string // multi: every key
}

// shape is what a round sends besides its key and token.
type shape struct {
	fair  *fairness
	fence *fencing
	v     *variant
}

// token returns an attempt's token: a fresh random one, or the owner of a
// reentrant lock.
func (sh shape) token() string {
	if sh.v != nil && sh.v.kind == kindReentrant {
		return sh.v.owner
	}
	return uuid.NewString()
}

// leaves reports whether a waiter that gives up leaves something to take
// back (a fair queue entry, a writer's intent).
func (sh shape) leaves() bool {
	return sh.fair != nil || (sh.v != nil && sh.v.kind == kindWrite)
}

// shared reports whether others may hold the lock along with this one (a
// reader): a waiter that gets it passes the wake-up on.
func (sh shape) shared() bool { return sh.v != nil && sh.v.kind == kindRead }

// keys returns the keys whose release a waiter waits for.
func (sh shape) keys(key string) []string {
	if sh.v != nil && sh.v.kind == kindMulti {
		return sh.v.keys
	}
	return []string{key}
}

// withCount returns sh with a reentrant lock's count set to n; the last
// release (n = 0) gets an id of its own to be announced by, since every
// release of one owner has the same token.
func (sh shape) withCount(n int64) shape {
	if sh.v != nil && sh.v.kind == kindReentrant {
		v := *sh.v
		v.count = n
		if n == 0 {
			v.release = uuid.NewString()[:8]
		}
		sh.v = &v
	}
	return sh
}

// shape is what the lock's later rounds send: its acquisition's kind and
// queue (not its fencing, which only the acquisition commits).
func (l *Lock) shape() shape { return shape{fair: l.acq.fair, v: l.acq.v} }

func (v *variant) command(r *round, op opKind, dst []any) (*scripts.Script, string, []any) {
	key, tok := r.key, r.token
	switch v.kind {
	case kindReentrant:
		switch op {
		case opAcquire:
			return scripts.Reentrant, "", append(dst, key, "acquire", tok, r.ttlMS, v.count)
		case opExtend:
			return scripts.Reentrant, "", append(dst, key, "extend", tok, r.ttlMS)
		case opRelease:
			ch := ""
			if v.count == 0 {
				ch = wakeChannel(key)
			}
			return scripts.Reentrant, "", append(dst, key, "release", tok, v.count, ch, v.release)
		default: // opRollback of a first hold: nothing was held before
			return scripts.Reentrant, "", append(dst, key, "release", tok, 0, "")
		}
	case kindRead, kindWrite:
		mode := "read"
		if v.kind == kindWrite {
			mode = "write"
		}
		switch op {
		case opAcquire:
			return scripts.RW, "", append(dst, key, mode, tok, r.ttlMS, v.intentMS, v.writer)
		case opExtend:
			return scripts.RW, "", append(dst, key, "extend-"+mode, tok, r.ttlMS)
		case opRelease:
			return scripts.RW, "", append(dst, key, "release-"+mode, tok, wakeChannel(key))
		case opRollback:
			return scripts.RW, "", append(dst, key, "release-"+mode, tok, "")
		default: // opLeave, announced: readers the intent held back may enter
			return scripts.RW, "", append(dst, key, "leave", v.writer, wakeChannel(key))
		}
	default: // kindMulti
		for _, k := range v.keys {
			dst = append(dst, k)
		}
		switch op {
		case opAcquire:
			return scripts.Multi, "", append(dst, "acquire", tok, r.ttlMS)
		case opExtend:
			return scripts.Multi, "", append(dst, "extend", tok, r.ttlMS)
		case opRelease:
			return scripts.Multi, "", append(dst, "release", tok, wakePrefix)
		default: // opRollback
			return scripts.Multi, "", append(dst, "release", tok, "")
		}
	}
}

// kindConfig builds a lock's settings and rejects the options its kind
// does not support.
func (c *Client) kindConfig(kind string, key string, opts []LockOption) (lockConfig, error) {
	lc, err := c.lockConfig(key, opts)
	if err != nil {
		return lc, err
	}
	if lc.fair || lc.fencing {
		return lc, fmt.Errorf("%w: %s locks support neither WithFair nor WithFencing", ErrInvalid, kind)
	}
	return lc, nil
}

// AcquireRead takes a read hold on key: any number of readers may hold it
// at once, but no writer. A waiting writer has precedence: while one waits
// (for a bounded time after its last attempt, so that a vanished writer
// cannot block readers for long) new readers wait too. Every reader has
// its own entry with its own expiry, on one Redis hash per key (so it
// works on Redis Cluster nodes); only the reader itself can release or
// extend its entry. The returned Lock behaves like any other: Extend,
// Release, WithAutoExtend, Lost. Use the key only for read-write locks.
func (c *Client) AcquireRead(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	lc, err := c.kindConfig("read-write", key, opts)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, key, &lc, shape{v: &variant{kind: kindRead}})
}

// AcquireWrite takes the write hold on key: no reader and no other writer
// holds it meanwhile. See AcquireRead.
func (c *Client) AcquireWrite(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	lc, err := c.kindConfig("read-write", key, opts)
	if err != nil {
		return nil, err
	}
	v := &variant{kind: kindWrite, writer: uuid.NewString(), intentMS: c.entryTTL(&lc).Milliseconds()}
	return c.acquire(ctx, key, &lc, shape{v: v})
}

// AcquireMulti takes keys all at once: on each master either every key is
// set or none is, so two clients locking overlapping sets can never hold
// one part each and wait for the other (no lock ordering is needed). The
// lock counts as held with a quorum of masters that set every key. With
// WithClusterSlots the keys must share a Redis Cluster hash slot (give
// them a common hash tag, such as {order:7}); keys that do not are
// rejected. Lock.Keys returns them; Lock.Key the first.
func (c *Client) AcquireMulti(ctx context.Context, keys []string, opts ...LockOption) (*Lock, error) {
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	if err := c.checkMultiKeys(keys); err != nil {
		return nil, err
	}
	lc, err := c.kindConfig("multi-key", keys[0], opts)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, keys[0], &lc, shape{v: &variant{kind: kindMulti, keys: append([]string(nil), keys...)}})
}

func (c *Client) checkMultiKeys(ks []string) error {
	if len(ks) == 0 {
		return fmt.Errorf("%w: no keys", ErrInvalid)
	}
	seen := make(map[string]bool, len(ks))
	slot := keys.Slot(ks[0])
	for i, k := range ks {
		if k == "" {
			return fmt.Errorf("%w: key %d is empty", ErrInvalid, i)
		}
		if seen[k] {
			return fmt.Errorf("%w: key %q appears twice", ErrInvalid, k)
		}
		seen[k] = true
		if c.clusterSlots {
			if b := keys.Slot(k); b != slot {
				return fmt.Errorf("%w: keys %q (hash slot %d) and %q (hash slot %d) are in different Redis Cluster slots, "+
					"and one script cannot touch both: give them a common hash tag, such as {order:7}:items and {order:7}:payment",
					ErrInvalid, ks[0], slot, k, b)
			}
		}
	}
	return nil
}

// Keys returns the locked keys: one, or those of AcquireMulti.
func (l *Lock) Keys() []string {
	if l == nil || l.acq == nil {
		return nil // no acquisition returned it
	}
	if v := l.acq.v; v != nil && v.kind == kindMulti {
		return append([]string(nil), v.keys...)
	}
	return []string{l.key}
}

// Reentrant is a reentrant lock on one key for one owner: the owner may
// take it again while holding it, and must release it as many times. Go
// has no thread identity, so the owner is explicit: goroutines that share
// a Reentrant act as one owner. The lock lives on each master as a hash
// holding the owner and its hold count; counts are set, never
// incremented, so a master that missed an update is put right by the next
// one. Another owner (another Reentrant with another owner ID) is refused
// while it is held. A Reentrant is safe for concurrent use.
type Reentrant struct {
	c     *Client
	key   string
	owner string
	lc    lockConfig

	mu    sync.Mutex
	lock  *Lock // while held
	count int64
}

// NewReentrant returns a reentrant lock on key for owner (a random owner
// when empty). It sends nothing; opts apply to every acquisition. An owner
// ID must be used by one Reentrant at a time: two handles with the same
// owner count their holds separately.
func (c *Client) NewReentrant(key, owner string, opts ...LockOption) (*Reentrant, error) {
	if err := c.valid(); err != nil {
		return nil, err
	}
	lc, err := c.kindConfig("reentrant", key, opts)
	if err != nil {
		return nil, err
	}
	if owner == "" {
		owner = uuid.NewString()
	}
	return &Reentrant{c: c, key: key, owner: owner, lc: lc}, nil
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
// when none is left. The first hold waits like Client.Acquire.
func (r *Reentrant) Acquire(ctx context.Context) error {
	if err := r.check(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var lim []time.Duration // the lost hold's expiry changes still in flight
	if r.lock != nil {
		if err := r.lock.Err(); err != nil {
			// Lost: start over.
			lim = r.lock.limitsBeforeNext()
			r.lock, r.count = nil, 0
		}
	}
	if r.lock == nil {
		l, err := r.c.acquire(ctx, r.key, &r.lc, shape{v: &variant{kind: kindReentrant, owner: r.owner, count: 1}})
		if err != nil {
			return err
		}
		if err := l.inherit(lim); err != nil {
			_ = l.Release(context.WithoutCancel(ctx))
			return err
		}
		r.lock, r.count = l, 1
		return nil
	}
	if err := r.lock.reenter(ctx, r.count+1); err != nil {
		return err
	}
	r.count++
	return nil
}

// Release gives one hold back. The last one deletes the lock on the
// masters and wakes its waiters; the others set the count there. It
// returns an error matching ErrNotHeld when the owner holds nothing.
func (r *Reentrant) Release(ctx context.Context) error {
	if err := r.check(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lock == nil {
		return fmt.Errorf("%w: release %q: owner %q holds no lock", ErrNotHeld, r.key, r.owner)
	}
	if r.count > 1 {
		if err := r.lock.setCount(ctx, r.count-1); err != nil {
			return err
		}
		r.count--
		return nil
	}
	l := r.lock
	r.lock, r.count = nil, 0
	return l.Release(ctx)
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

func (l *Lock) countRound(ctx context.Context, op opKind, n int64, what string) error {
	c := l.c
	l.op.Lock()
	defer l.op.Unlock()
	start := c.clock.Now()
	until, err := l.checkHeld(what, start)
	if err != nil {
		return err
	}
	var lim []time.Duration
	if op == opAcquire {
		lim = l.limits()
	}
	// Counts are set, so the rounds must reach each master in order.
	r, err := c.startRound(ctx, op, l.key, l.token, l.ttl, l.follow(), l.shape().withCount(n))
	if err != nil {
		return err
	}
	l.chain = r
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
	} else if t.ok(c.quorum) {
		return nil // a count set, the expiry untouched
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

// entryTTL is how long a waiter's mark (a fair queue entry, a writer's
// intent) lasts without a new attempt: several times the longest backoff.
func (c *Client) entryTTL(lc *lockConfig) time.Duration {
	entry := 4*lc.backoffMax + 2*c.timeout
	if entry < 100*time.Millisecond {
		entry = 100 * time.Millisecond
	}
	return entry
}
