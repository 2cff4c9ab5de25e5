package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/redlock"
)

// The workload: each worker draws operations from its own stream of the
// seed, one lock kind each: a plain lock (some fenced), a reentrant hold,
// a read or a write hold of a read-write lock, a multi-key lock, a fair
// lock, an election campaign, a read of an election's leader, or a permit
// of a semaphore (some fenced; drawn from a second stream of the worker's,
// so that the other kinds' draws are those of a run without it). Every
// draw is made before the operation runs, so an operation is a value (an
// OpSpec) that a shrunk replay can run again without its neighbours.

// OpKind is the kind of lock an operation takes.
type OpKind uint8

// The operations of the workload.
const (
	OpPlain     OpKind = iota // Acquire or TryAcquire, some fenced
	OpReentrant               // a hold of an owner shared by two workers
	OpRead                    // AcquireRead or TryAcquireRead
	OpWrite                   // AcquireWrite or TryAcquireWrite
	OpMulti                   // AcquireMulti or TryAcquireMulti of 2 or 3 keys
	OpFair                    // Acquire WithFair
	OpCampaign                // Election.Campaign, then Resign
	OpLeader                  // Election.Leader
	OpSemaphore               // Semaphore.Acquire or TryAcquire, some fenced
)

var opNames = [...]string{"plain", "reentrant", "read", "write", "multi", "fair", "campaign", "leader", "semaphore"}

func (k OpKind) String() string { return opNames[k] }

// ParseKinds parses a comma-separated list of operation names.
func ParseKinds(s string) ([]OpKind, error) {
	var out []OpKind
	for _, name := range strings.Split(s, ",") {
		i := slices.Index(opNames[:], strings.TrimSpace(name))
		if i < 0 {
			return nil, fmt.Errorf("sim: no operation %q (one of %s)", name, strings.Join(opNames[:], ", "))
		}
		out = append(out, OpKind(i))
	}
	return out, nil
}

// An OpSpec is one operation of one worker, every choice in it drawn.
type OpSpec struct {
	Worker  int           // index of the worker (client*Workers + worker)
	At      time.Duration // virtual time it began in the run it was drawn in
	Pause   time.Duration // the worker's pause before it
	Kind    OpKind
	Keys    []string
	TTL     time.Duration
	Try     bool          // one attempt (TryAcquire…), else wait up to Wait
	Wait    time.Duration // WithWait, or a campaign's ctx
	Fenced  bool
	Extends []Extension
	Hold    time.Duration // before the release (reentrant, campaign)
	Abandon bool          // no release: the lock expires
}

// An Extension is one Extend of a held lock, after a pause.
type Extension struct {
	After, TTL time.Duration
}

func (o OpSpec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%8v w%-2d %s %s", o.At.Round(time.Microsecond), o.Worker, o.Kind, strings.Join(o.Keys, ","))
	if o.Kind == OpLeader {
		return b.String()
	}
	if o.Try {
		b.WriteString(" try")
	} else {
		fmt.Fprintf(&b, " wait=%v", o.Wait.Round(time.Millisecond))
	}
	if o.Kind != OpReentrant && o.Kind != OpCampaign {
		fmt.Fprintf(&b, " ttl=%v", o.TTL)
	}
	if o.Fenced {
		b.WriteString(" fenced")
	}
	for _, e := range o.Extends {
		fmt.Fprintf(&b, " +%v:extend(%v)", e.After.Round(time.Millisecond), e.TTL)
	}
	if o.Hold > 0 {
		fmt.Fprintf(&b, " hold=%v", o.Hold.Round(time.Millisecond))
	}
	if o.Abandon {
		b.WriteString(" abandon")
	} else {
		b.WriteString(" release")
	}
	return b.String()
}

const (
	electionTTL = 300 * time.Millisecond
	elections   = 2
	// semPermits is the permit count of every semaphore of the workload.
	semPermits = 3
	// semShare is the share of operations that are semaphore permits
	// (one in semShare), when the workload has other kinds too.
	semShare = 10
)

// drawOp draws worker w's next operation, of one of Config.Kinds when
// set: a semaphore permit from srng, any other kind from rng.
func (r *run) drawOp(w int, rng, srng *rand.Rand) OpSpec {
	kinds := r.cfg.Kinds
	if len(kinds) == 0 || slices.Contains(kinds, OpSemaphore) {
		if len(kinds) == 1 || srng.IntN(semShare) == 0 {
			return r.drawSemaphore(w, srng)
		}
	}
	for {
		o := r.drawAny(w, rng)
		if len(r.cfg.Kinds) == 0 || slices.Contains(r.cfg.Kinds, o.Kind) {
			return o
		}
	}
}

func (r *run) drawAny(w int, rng *rand.Rand) OpSpec {
	o := OpSpec{Worker: w, Pause: time.Duration(rng.Int64N(int64(think)))}
	keys := r.cfg.Keys
	pick := func(prefix string, n int) string { return fmt.Sprintf("%s%d", prefix, rng.IntN(max(n, 1))) }
	switch k := rng.IntN(20); {
	case k < 6:
		o.Kind, o.Keys = OpPlain, []string{pick("k", keys)}
		o.Fenced = rng.IntN(3) == 0
	case k < 12:
		o.Kind, o.Keys = OpReentrant, []string{pick("r", keys/2)}
	case k < 13:
		o.Kind, o.Keys = OpRead, []string{pick("w", keys/4)}
	case k < 14:
		o.Kind, o.Keys = OpWrite, []string{pick("w", keys/4)}
	case k < 16:
		o.Kind = OpMulti
		n := max(keys/2, 3)
		perm := rng.Perm(n)[:2+rng.IntN(2)]
		for _, i := range perm {
			o.Keys = append(o.Keys, fmt.Sprintf("m%d", i))
		}
	case k < 18:
		o.Kind, o.Keys = OpFair, []string{pick("f", keys/4)}
	case k < 19:
		o.Kind, o.Keys = OpCampaign, []string{pick("e", elections)}
	default:
		o.Kind, o.Keys = OpLeader, []string{pick("e", elections)}
		return o
	}
	o.TTL = ttls[rng.IntN(len(ttls))]
	o.Try = rng.IntN(3) == 0
	o.Wait = time.Duration(rng.Int64N(int64(maxWait)))
	switch o.Kind {
	case OpReentrant:
		o.Hold = time.Duration(rng.Int64N(int64(reentrantTTL / 3)))
		return o
	case OpCampaign:
		o.Try = false
		o.Wait = time.Duration(rng.Int64N(int64(time.Second)))
		o.Hold = time.Duration(rng.Int64N(int64(3 * electionTTL)))
		return o
	case OpFair:
		o.Try = rng.IntN(4) == 0
	}
	drawHold(&o, rng)
	return o
}

// drawHold draws a held lock's extensions, and whether it is abandoned.
func drawHold(o *OpSpec, rng *rand.Rand) {
	ttl := o.TTL
	for n := rng.IntN(4); n > 0; n-- {
		e := Extension{After: time.Duration(rng.Int64N(int64(ttl / 3))), TTL: ttls[rng.IntN(len(ttls))]}
		o.Extends = append(o.Extends, e)
		ttl = e.TTL
	}
	o.Abandon = rng.IntN(4) == 0
}

// drawSemaphore draws a permit of one of the semaphores (a quarter as
// many as the keys), held, extended and released or abandoned as a
// plain lock is.
func (r *run) drawSemaphore(w int, rng *rand.Rand) OpSpec {
	o := OpSpec{Worker: w, Pause: time.Duration(rng.Int64N(int64(think))), Kind: OpSemaphore,
		Keys: []string{fmt.Sprintf("s%d", rng.IntN(max(r.cfg.Keys/4, 1)))}}
	o.Fenced = rng.IntN(3) == 0
	o.TTL = ttls[rng.IntN(len(ttls))]
	o.Try = rng.IntN(3) == 0
	o.Wait = time.Duration(rng.Int64N(int64(maxWait)))
	drawHold(&o, rng)
	return o
}

// A worker is one goroutine of a Client, with the locks it shares.
type worker struct {
	index     int
	who       string
	owner     string
	cl        *redlock.Client
	reentrant map[string]*redlock.Reentrant
	elections map[string]*election.Election
}

// work runs the worker's operations until the run ends: drawn from its
// stream, or those of the script.
func (r *run) work(w *worker) {
	if r.cfg.Script != nil {
		for _, o := range r.cfg.Script.Ops {
			if o.Worker != w.index {
				continue
			}
			if r.stopping() {
				return
			}
			if d := time.Until(r.begin.Add(o.At)); d > 0 {
				time.Sleep(d)
			}
			r.exec(w, o)
		}
		return
	}
	rng, srng := r.rng(10000+uint64(w.index)), r.rng(30000+uint64(w.index))
	for !r.stopping() {
		o := r.drawOp(w.index, rng, srng)
		time.Sleep(o.Pause)
		o.At = r.since(time.Now())
		r.mu.Lock()
		r.drawn = append(r.drawn, o)
		r.mu.Unlock()
		r.exec(w, o)
	}
}

func (r *run) exec(w *worker, o OpSpec) {
	switch o.Kind {
	case OpReentrant:
		r.reentrantOnce(w, o)
	case OpCampaign:
		r.campaignOnce(w, o)
	case OpLeader:
		r.leaderOnce(w, o)
	case OpSemaphore:
		r.semaphoreOnce(w, o)
	default:
		r.lockOnce(w, o)
	}
}

var backoff = redlock.WithBackoff(2*time.Millisecond, 50*time.Millisecond)

// lockOnce takes a plain, read, write, multi-key or fair lock, extends
// it, and releases it (or abandons it).
func (r *run) lockOnce(w *worker, o OpSpec) {
	key, who, cl := o.Keys[0], w.who, w.cl
	opts := []redlock.LockOption{redlock.WithTTL(o.TTL), backoff}
	if o.Fenced {
		opts = append(opts, redlock.WithFencing())
	}
	if o.Kind == OpFair {
		opts = append(opts, redlock.WithFair())
	}
	if !o.Try {
		opts = append(opts, redlock.WithWait(o.Wait))
	}
	var l *redlock.Lock
	var err error
	r.call(key, who, func(ctx context.Context) {
		switch {
		case o.Kind == OpRead && o.Try:
			l, err = cl.TryAcquireRead(ctx, key, opts...)
		case o.Kind == OpRead:
			l, err = cl.AcquireRead(ctx, key, opts...)
		case o.Kind == OpWrite && o.Try:
			l, err = cl.TryAcquireWrite(ctx, key, opts...)
		case o.Kind == OpWrite:
			l, err = cl.AcquireWrite(ctx, key, opts...)
		case o.Kind == OpMulti && o.Try:
			l, err = cl.TryAcquireMulti(ctx, o.Keys, opts...)
		case o.Kind == OpMulti:
			l, err = cl.AcquireMulti(ctx, o.Keys, opts...)
		case o.Try:
			l, err = cl.TryAcquire(ctx, key, opts...)
		default:
			l, err = cl.Acquire(ctx, key, opts...)
		}
	})
	r.stats.Acquires.Add(1)
	if err != nil {
		r.notes(o.Keys, "%s %s acquire failed: %v", who, o.Kind, short(err))
		return
	}
	r.stats.grant(o.Kind)
	h := &holder{l: l, id: l.Token(), who: who, shared: o.Kind == OpRead}
	r.granted(o.Keys, h, o.Fenced)
	for _, e := range o.Extends {
		if r.stopping() {
			break
		}
		time.Sleep(e.After)
		r.call(key, who, func(ctx context.Context) { err = l.Extend(ctx, e.TTL) })
		r.stats.Extends.Add(1)
		if err != nil {
			r.notes(o.Keys, "%s extend to %v failed: %v (until %v)", who, e.TTL, short(err), r.since(l.Until()))
			break
		}
		r.stats.Extended.Add(1)
		r.extended(o.Keys, h)
	}
	if o.Abandon {
		r.notes(o.Keys, "%s abandons its lock", who)
		return
	}
	r.release(o.Keys, who, l, func(ctx context.Context) error { return l.Release(ctx) })
}

// release runs a Release and checks that the lock is no longer valid
// when it returns.
func (r *run) release(keys []string, who string, l *redlock.Lock, f func(ctx context.Context) error) {
	var err error
	r.call(keys[0], who, func(ctx context.Context) { err = f(ctx) })
	r.stats.Releases.Add(1)
	if err == nil {
		r.stats.Released.Add(1)
	}
	r.notes(keys, "%s released: %v (until %v)", who, short(err), r.since(l.Until()))
	if u := l.Until(); u.After(time.Now()) {
		r.fail(keys[0], "%s: Until %v after Release returned", who, r.since(u))
	}
}

// reentrantOnce takes a reentrant lock of the worker's owner (shared with
// another worker, which may hold it: then this is a second hold), holds
// it a while, and gives the hold back.
func (r *run) reentrantOnce(w *worker, o OpSpec) {
	key, who, owner := o.Keys[0], w.who, w.owner
	re := w.reentrant[key]
	var err error
	r.call(key, who, func(ctx context.Context) {
		if o.Try {
			err = re.TryAcquire(ctx)
		} else {
			err = re.Acquire(ctx)
		}
	})
	r.stats.Acquires.Add(1)
	if err != nil {
		r.note(key, "%s (%s) acquire failed: %v", who, owner, short(err))
		return
	}
	r.stats.grant(o.Kind)
	l := re.Lock()
	if l == nil {
		r.fail(key, "%s (%s): Acquire succeeded, no lock held", who, owner)
		return
	}
	r.granted(o.Keys, &holder{l: l, id: owner, who: who}, false)
	time.Sleep(o.Hold)
	r.call(key, who, func(ctx context.Context) { err = re.Release(ctx) })
	r.stats.Releases.Add(1)
	if err == nil {
		r.stats.Released.Add(1)
	}
	r.note(key, "%s (%s) released a hold: %v (count %d, until %v)", who, owner, short(err), re.Count(), r.since(l.Until()))
}

// campaignOnce campaigns in an election, leads for a while (the lock
// extends itself) and resigns. Terms must go up, and no two leaders be
// valid at once.
func (r *run) campaignOnce(w *worker, o OpSpec) {
	key, who := o.Keys[0], w.who
	e := w.elections[key]
	var ld *election.Leadership
	var err error
	value := fmt.Sprintf("%s/%d", who, r.stats.Acquires.Load())
	r.call(key, who, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, o.Wait)
		defer cancel()
		ld, err = e.Campaign(ctx, value)
	})
	r.stats.Acquires.Add(1)
	if err != nil {
		r.note(key, "%s campaign failed: %v", who, short(err))
		return
	}
	r.stats.grant(o.Kind)
	l := ld.Lock()
	h := &holder{l: l, id: l.Token(), who: who, value: ld.Value(), term: ld.Term()}
	if h.value != value {
		r.fail(key, "%s: leadership's value %q, campaigned with %q", who, h.value, value)
	}
	r.granted(o.Keys, h, true)
	t := time.NewTimer(o.Hold)
	select {
	case <-t.C:
	case <-ld.Lost():
		t.Stop()
		r.note(key, "%s lost its leadership: %v", who, short(ld.Err()))
	}
	r.release(o.Keys, who, l, ld.Resign)
}

// leaderOnce reads an election's leader: a leader valid all through the
// read is the one it must report, if it reports one.
func (r *run) leaderOnce(w *worker, o OpSpec) {
	key, who := o.Keys[0], w.who
	before := time.Now()
	r.mu.Lock()
	var valid []*holder
	for _, h := range r.holders[key] {
		if h.l.Until().After(before) {
			valid = append(valid, h)
		}
	}
	r.mu.Unlock()
	var ld election.Leader
	var err error
	r.call(key, who, func(ctx context.Context) { ld, err = w.elections[key].Leader(ctx) })
	r.stats.Leaders.Add(1)
	now := time.Now()
	if err != nil {
		if !errors.Is(err, election.ErrNoLeader) {
			r.note(key, "%s leader read failed: %v", who, short(err))
		}
		return
	}
	r.note(key, "%s reads leader %s term %d", who, ld.Value, ld.Term)
	for _, h := range valid {
		if h.l.Until().After(now) && (h.value != ld.Value || h.term != ld.Term) {
			r.fail(key, "Leader reported %q term %d while %s (%q term %d) led all through the read (until %v)",
				ld.Value, ld.Term, h.who, h.value, h.term, r.since(h.l.Until()))
		}
	}
}

// semaphoreOnce takes a permit of a semaphore of semPermits, extends it,
// and releases it (or abandons it). Each slot is checked as a lock key
// (no two valid holders, fences that only go up), and the semaphore as a
// whole: never more than semPermits valid permits at once.
func (r *run) semaphoreOnce(w *worker, o OpSpec) {
	sem, who, cl := o.Keys[0], w.who, w.cl
	opts := []redlock.LockOption{redlock.WithTTL(o.TTL), backoff}
	if o.Fenced {
		opts = append(opts, redlock.WithFencing())
	}
	if !o.Try {
		opts = append(opts, redlock.WithWait(o.Wait))
	}
	s, err := cl.NewSemaphore(sem, semPermits, opts...)
	if err != nil {
		r.fail(sem, "%s: NewSemaphore: %v", who, err)
		return
	}
	var p *redlock.Permit
	r.call(sem, who, func(ctx context.Context) {
		if o.Try {
			p, err = s.TryAcquire(ctx)
		} else {
			p, err = s.Acquire(ctx)
		}
	})
	r.stats.Acquires.Add(1)
	if err != nil {
		r.note(sem, "%s permit failed: %v", who, short(err))
		return
	}
	r.stats.grant(o.Kind)
	slot := []string{p.Key()}
	h := &holder{l: p.Lock, id: p.Token(), who: who}
	r.granted(slot, h, o.Fenced)
	r.permitted(sem, p.Slot(), h)
	for _, e := range o.Extends {
		if r.stopping() {
			break
		}
		time.Sleep(e.After)
		r.call(sem, who, func(ctx context.Context) { err = p.Extend(ctx, e.TTL) })
		r.stats.Extends.Add(1)
		if err != nil {
			r.notes([]string{sem, slot[0]}, "%s extend of slot %d to %v failed: %v (until %v)", who, p.Slot(), e.TTL, short(err), r.since(p.Until()))
			break
		}
		r.stats.Extended.Add(1)
		r.extended(slot, h)
		r.permitted(sem, p.Slot(), h)
	}
	if o.Abandon {
		r.notes([]string{sem, slot[0]}, "%s abandons its permit of slot %d", who, p.Slot())
		return
	}
	r.release(slot, who, p.Lock, p.Release)
	r.note(sem, "%s released slot %d", who, p.Slot())
}
