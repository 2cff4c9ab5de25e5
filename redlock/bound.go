package redlock

import (
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/stall"
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
// "An adaptive bound for acquisitions" in docs/design.md.

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

// noteAnswer records master i's answer to a round (or to the identity
// probe) that started at start, read at now; only real-clock rounds count
// (a simulated clock's waits are no host's).
func (c *Client) noteAnswer(i int, start, now time.Time) {
	if !c.realClock || c.peaks == nil {
		return
	}
	if d := now.Sub(start); d > c.timeout/8 {
		c.peaks[i].note(d, now)
	}
}

// hostSlowness is how long masters have taken to answer of late, at a
// quorum (the quorum-th lowest decayed peak), or this process's latest
// stall, decayed alike, when that is more.
func (c *Client) hostSlowness(now time.Time) time.Duration {
	var s time.Duration
	if c.peaks != nil {
		var buf [16]time.Duration
		ps := buf[:0]
		for i := range c.peaks {
			ps = append(ps, c.peaks[i].load(now))
		}
		slices.Sort(ps)
		s = ps[c.quorum-1]
	}
	if c.stalls == nil || !c.realClock {
		return s
	}
	if end, d, ok := c.stalls.Last(); ok {
		if age := now.Sub(end); age >= 0 {
			s = max(s, decay(d, age))
		}
	}
	return s
}

// boundFor returns how long a round of op with ttl waits for a master:
// the adaptive bound for acquisitions and extensions, the per-master
// timeout for the other rounds (a release waits releaseWait).
func (c *Client) boundFor(op opKind, ttl time.Duration) time.Duration {
	if op != opAcquire && op != opExtend {
		return c.timeout
	}
	return c.adaptiveBound(ttl, time.Now())
}

// adaptiveBound is twice the host's slowness, at least the per-master
// timeout, at most boundCeiling.
func (c *Client) adaptiveBound(ttl time.Duration, now time.Time) time.Duration {
	w := 2 * c.hostSlowness(now)
	if w <= c.timeout {
		return c.timeout
	}
	return min(w, c.boundCeiling(ttl))
}

// boundRisen is asked by collect when the wait of round r, waited so
// far, ends with its outcome open: when the adaptive bound has risen
// since (answers read meanwhile, a stall of this process, showed the host
// slower than when the round started), it returns the bound now and how
// much longer, from now, the round waits on: until its start and that
// bound, within the cap. Else more is 0. Only acquisitions on the real
// clock; validity is counted from the round's start, so the longer wait
// only shortens it. An extension keeps its wait: the lock it extends may
// run out during a longer one, and a holder told ErrNotExtended in time
// can still try again.
func (c *Client) boundRisen(r *round, waited time.Duration, now time.Time) (b, more time.Duration) {
	if !c.realClock || r.op != opAcquire {
		return waited, 0
	}
	b = c.adaptiveBound(time.Duration(r.ttlMS)*time.Millisecond, now)
	if b <= waited {
		return waited, 0
	}
	if more = r.started().Add(b).Sub(now); more <= time.Millisecond {
		return waited, 0
	}
	return b, more
}

// boundCeiling is the most an acquisition or an extension of ttl waits
// for a master: the stall bound or a tenth of ttl, whichever is less, and
// never less than the per-master timeout.
func (c *Client) boundCeiling(ttl time.Duration) time.Duration {
	return max(c.timeout, min(stall.LateBound(c.timeout), ttl/10))
}

// releaseWait is how long a release waits for a master: one per-master
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
func (c *Client) releaseWait() time.Duration {
	if c.someOrdered {
		return max(c.timeout, stall.LateBound(c.timeout)/2)
	}
	return stall.LateBound(c.timeout)
}
