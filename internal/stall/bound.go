package stall

import (
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/clock"
)

// The adaptive per-master bound: how long an acquisition or an extension
// waits for a master. The per-master timeout is chosen for a host whose
// masters answer in a millisecond; on a host so loaded that every master
// answers late at once (its CPUs busy, this process descheduled), a round
// that waits only the timeout counts masters failed that answered, and
// TryAcquire fails with every master up. So a round's wait follows what
// the masters' answers took of late:
//
//   - each master keeps a decaying peak of its round trips (from a
//     round's start, or for the legs of a led attempt from the lead's
//     answer (leg.askedAt), to its answer, late answers included: a
//     master that answered late is slow, not down; and the identity
//     probe's, from its INFO's send, so that a Client's first rounds
//     already follow a host found slow at first contact); the peak
//     halves every boundHalfLife without a higher one;
//   - the host's figure is the quorum-th lowest of those peaks, so that
//     masters beyond a quorum's worth — slow ones, or hung ones, whose
//     peaks say nothing — never raise it, and the latest stall of this
//     process (stall.go), decaying alike, when it is higher;
//   - the wait is twice that figure, never less than the per-master
//     timeout and never more than the cap: the stall bound (LateBound:
//     one timeout, at least a second) or a tenth of the lock's TTL,
//     whichever is less (but never less than the timeout).
//
// The cap is the documented cost of a hung master: an acquisition or an
// extension that needs the answer of a master that does not answer gives
// up on it at most the cap after its start (a second with the defaults,
// TTL 10 s and timeout 50 ms), plus what patience adds for a process
// that did not run; only while a quorum of masters has answered that
// slowly within the last few half-lives. A master silent for longer than
// the round's wait is down as before: later rounds do not send to it.
// On a quiet host the figure stays below half the timeout and the wait
// is the timeout, as before. Validity is counted from the call's start
// whatever the wait: a longer wait leaves less of it, never more. See
// "A busy host is not a silent master: the adaptive bound" in
// docs/design.md.

// boundHalfLife is how fast a master's peak round trip is forgotten.
const boundHalfLife = 2 * time.Second

// peak is one master's decaying peak round trip: the highest answer time
// seen, halved every boundHalfLife since. Written only by an answer that
// beats it, so a host that answers fast writes nothing.
//
// Its age is read on the monotonic clock (at keeps time.Now()'s reading
// whole): a wall clock stepped back an hour would keep a peak at its
// height for that hour, one stepped forward would forget it at once.
type peak struct {
	v  atomic.Int64              // the peak, ns
	at atomic.Pointer[time.Time] // when it was seen; a new one only when the peak rises
}

// load returns the peak decayed to now.
func (p *peak) load(now time.Time) time.Duration {
	v := p.v.Load()
	if v == 0 {
		return 0
	}
	at := p.at.Load()
	if at == nil {
		return time.Duration(v)
	}
	age := now.Sub(*at)
	if age <= 0 {
		return time.Duration(v)
	}
	return decay(time.Duration(v), age)
}

// note records an answer that took d, seen at now. Two answers noted at
// once may pair one's peak with the other's time: the peak then decays
// from a moment a few microseconds off, which changes nothing that
// matters.
func (p *peak) note(d time.Duration, now time.Time) {
	if d > p.load(now) {
		p.v.Store(int64(d))
		p.at.Store(&now)
	}
}

// decay is v halved for every boundHalfLife in age.
func decay(v, age time.Duration) time.Duration {
	if age >= 32*boundHalfLife {
		return 0
	}
	return time.Duration(float64(v) * math.Exp2(-float64(age)/float64(boundHalfLife)))
}

// Bound is one Client's rule for how long a round waits for a master:
// the adaptive bound of its acquisitions and extensions (For, Risen,
// Ceiling), fed by its masters' answers (Note) and its stall detector's
// latest stall, and the wait of its releases (ReleaseWait). Which rounds
// get which wait is the caller's choice. It holds only atomics and
// values fixed by NewBound: safe for concurrent use, no lock, no
// goroutine, no timer. Make it with NewBound; a nil *Bound notes nothing.
type Bound struct {
	peaks       []peak // per master, its decaying peak round trip
	quorum      int
	timeout     time.Duration // the per-master timeout
	real        bool          // the clock is clock.Real(): its rounds' waits are this host's
	stalls      *Stalls       // the Client's detector; nil: no stall counts
	someOrdered bool          // at least one master's transport is Ordered
}

// NewBound returns the Bound of a Client on clk with masters masters, of
// which quorum make a quorum, the per-master timeout timeout and the
// stall detector s (nil: none). someOrdered says that at least one
// master's transport is Ordered (ReleaseWait). Only on clock.Real() are
// answers noted: a simulated clock's waits are no host's, and For is
// then always the timeout.
func NewBound(clk clock.Clock, s *Stalls, masters, quorum int, timeout time.Duration, someOrdered bool) *Bound {
	return &Bound{
		peaks:       make([]peak, masters),
		quorum:      quorum,
		timeout:     timeout,
		real:        clk == clock.Real(),
		stalls:      s,
		someOrdered: someOrdered,
	}
}

// Note records master i's answer to a round (or to the identity probe)
// that started at start, read at now; only real-clock rounds count (a
// simulated clock's waits are no host's), and only answers slower than
// an eighth of the timeout.
func (b *Bound) Note(i int, start, now time.Time) {
	if b == nil || !b.real || b.peaks == nil {
		return
	}
	if d := now.Sub(start); d > b.timeout/8 {
		b.peaks[i].note(d, now)
	}
}

// hostSlowness is how long masters have taken to answer of late, at a
// quorum (the quorum-th lowest decayed peak), or this process's latest
// stall, decayed alike, when that is more.
func (b *Bound) hostSlowness(now time.Time) time.Duration {
	var s time.Duration
	if b.peaks != nil {
		var buf [16]time.Duration
		ps := buf[:0]
		for i := range b.peaks {
			ps = append(ps, b.peaks[i].load(now))
		}
		slices.Sort(ps)
		s = ps[b.quorum-1]
	}
	if b.stalls == nil || !b.real {
		return s
	}
	if end, d, ok := b.stalls.Last(); ok {
		if age := now.Sub(end); age >= 0 {
			s = max(s, decay(d, age))
		}
	}
	return s
}

// For is the adaptive bound at now of a round of a lock of ttl: twice the
// host's slowness, at least the per-master timeout, at most Ceiling(ttl).
func (b *Bound) For(ttl time.Duration, now time.Time) time.Duration {
	w := 2 * b.hostSlowness(now)
	if w <= b.timeout {
		return b.timeout
	}
	return min(w, b.Ceiling(ttl))
}

// Risen is asked when the wait of a round of a lock of ttl that started
// at started, waited so far, ends with its outcome open: when the
// adaptive bound has risen since (answers read meanwhile, a stall of this
// process, showed the host slower than when the round started), it
// returns the bound now and how much longer, from now, the round waits
// on: until its start and that bound, within the cap. Else it returns
// waited and a more of 0 (as on any clock but the real one, or when less
// than a millisecond would be left). Validity is counted from the round's
// start, so the longer wait only shortens it.
func (b *Bound) Risen(ttl time.Duration, started time.Time, waited time.Duration, now time.Time) (bound, more time.Duration) {
	if !b.real {
		return waited, 0
	}
	bound = b.For(ttl, now)
	if bound <= waited {
		return waited, 0
	}
	if more = started.Add(bound).Sub(now); more <= time.Millisecond {
		return waited, 0
	}
	return bound, more
}

// Ceiling is the most an acquisition or an extension of ttl waits
// for a master: the stall bound or a tenth of ttl, whichever is less, and
// never less than the per-master timeout.
func (b *Bound) Ceiling(ttl time.Duration) time.Duration {
	return max(b.timeout, min(LateBound(b.timeout), ttl/10))
}

// ReleaseWait is how long a release waits for a master: one per-master
// timeout, and at least lateBound (a second with the default timeout) on
// transports that are not Ordered, half of it where some master's is
// (half a second), to stay clear of the stall bound at which a pipelined
// connection is broken (lateBound past its oldest unanswered command: a
// release waiting that long would be failed by the break, and cost the
// connection). A release has no validity to
// protect (the lock's ended when it started), so a master that is merely
// slow — its machine busy, all masters slowed at once on a loaded host —
// is waited for and confirms it, rather than counted failed at a bound
// chosen to keep a hung master from eating an acquisition's validity.
// The caller's ctx still bounds the wait, and the round returns as soon as
// a quorum is confirmed: only a release that needs a silent master's
// answer waits this long.
func (b *Bound) ReleaseWait() time.Duration {
	if b.someOrdered {
		return max(b.timeout, LateBound(b.timeout)/2)
	}
	return LateBound(b.timeout)
}

// Forget drops every master's peak round trip, as if none had answered
// slowly: For is the timeout again until a slow answer is noted (or but
// for this process's latest stall). For tests that count only their own
// rounds' answers.
func (b *Bound) Forget() {
	for i := range b.peaks {
		b.peaks[i].v.Store(0)
	}
}
