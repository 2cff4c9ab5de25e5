package redlock

import (
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/clock"
)

// A process stall is a time this process did not run: the CPUs were busy
// with other work, or it was stopped. Its readers read nothing then, so
// every master looks silent, and its timers fire late, all at once, when
// it runs again. A timer that fired late is the evidence: note keeps the
// latest, and what judges a master by its silence takes that stall off
// (in), so a master whose answers waited in the socket while this process
// did not run is not counted down for it.
//
// stalls is one Client's detector: its rounds' timers and its
// transports' beats feed it, its transports' silences read it. It reads
// the Client's clock; on any clock but clock.Real() the lateness of a
// timer is not this process's, and the detector sees no stall, arms no
// timer. Close stops it (stop). A nil *stalls sees no stall.
type stalls struct {
	clk    clock.Clock
	real   bool      // clk is clock.Real(): its timers' lateness is this process's
	start  time.Time // the monotonic reference of mono: a step of the wall clock is no stall
	last   atomic.Pointer[stallMark]
	rounds *beat // beats while some round of the client waits for its masters (collect, askRunIDs)
}

// stallMark is one stall: when it ended and how long it lasted, at least.
type stallMark struct {
	end time.Time     // when the late timer fired: the process ran again
	len time.Duration // how late it fired: how long, at least, it did not run
}

// newStalls returns the stall detector of a Client on clk.
func newStalls(clk clock.Clock) *stalls {
	s := &stalls{clk: clk, real: clk == clock.Real(), start: clk.Now()}
	s.rounds = s.newBeat(5 * time.Millisecond)
	return s
}

// lateBound is how long past a round's deadline a stall of this process
// is waited out — a reply read late, a chained command held back, collect
// waiting on: one per-master timeout, at least a second. A stall longer
// than that fails what it delays, as a hung master would.
func lateBound(timeout time.Duration) time.Duration {
	return max(timeout, time.Second)
}

// note records that a timer due at due fired at now, when it fired over a
// millisecond late. Timers that fire together when the process runs again
// saw the same stall, each from when it was due: the one due earliest saw
// the most of it, and its record is kept.
func (s *stalls) note(due, now time.Time) {
	if s == nil || !s.real || now.Sub(due) <= time.Millisecond {
		return
	}
	for {
		m := s.last.Load()
		if m != nil {
			apart := now.Sub(m.end)
			if apart < 2*time.Millisecond && apart > -2*time.Millisecond && !m.end.Add(-m.len).After(due) {
				return // the same stall, already seen from earlier
			}
		}
		if s.last.CompareAndSwap(m, &stallMark{end: now, len: now.Sub(due)}) {
			return
		}
	}
}

// in returns how much of the window of length d that ends at now this
// process spent in the latest stall it saw.
func (s *stalls) in(now time.Time, d time.Duration) time.Duration {
	if s == nil {
		return 0
	}
	m := s.last.Load()
	if m == nil {
		return 0
	}
	from := now.Add(-d)
	start := m.end.Add(-m.len)
	if start.Before(from) {
		start = from
	}
	end := m.end
	if end.After(now) {
		end = now
	}
	if end.Before(start) {
		return 0
	}
	return end.Sub(start)
}

// behind is how far this process is behind on the timers of its rounds
// (the round beat's overdue): a stall no timer has told of yet.
func (s *stalls) behind() time.Duration {
	if s == nil {
		return 0
	}
	return s.rounds.overdue()
}

// mono is the time since start, on the monotonic clock.
func (s *stalls) mono() time.Duration { return s.clk.Now().Sub(s.start) }

// monoTime is the time d after start, with its monotonic reading.
func (s *stalls) monoTime(d time.Duration) time.Time { return s.start.Add(d) }

// stop stops the round beat; the Client's Close calls it once no round
// is left.
func (s *stalls) stop() { s.rounds.stop() }

// beat tells how far this process is behind: a timer that fires every
// period while its users are in (enter, leave). When it has not fired for
// well over a period (overdue), this process has not run its timers, nor,
// likely, its readers — evidence of a stall that does not wait for a late
// timer to fire first, which matters right after the process runs again:
// a goroutine may then look at a master before any timer or reader has
// run. Each time it fires late, it records the stall (stalls.note). On a
// detector that is not on the real clock it is never armed.
type beat struct {
	s      *stalls
	period time.Duration
	users  atomic.Int64
	armed  atomic.Bool
	due    atomic.Int64 // when the timer is due, as stalls.mono()
	timer  *time.Timer
}

// newBeat returns a beat of period that records its stalls in s.
func (s *stalls) newBeat(period time.Duration) *beat {
	b := &beat{s: s, period: period}
	b.timer = time.AfterFunc(time.Hour, b.tick)
	b.timer.Stop()
	return b
}

// enter counts a user in, arming the timer for the first.
func (b *beat) enter() {
	b.users.Add(1)
	b.arm()
}

// leave counts a user out; the timer stops at its next tick.
func (b *beat) leave() { b.users.Add(-1) }

func (b *beat) arm() {
	if b.s.real && b.armed.CompareAndSwap(false, true) {
		b.due.Store(int64(b.s.mono() + b.period))
		b.timer.Reset(b.period)
	}
}

func (b *beat) tick() {
	now := b.s.mono()
	b.s.note(b.s.monoTime(time.Duration(b.due.Load())), b.s.monoTime(now))
	if b.users.Load() > 0 {
		b.due.Store(int64(now + b.period))
		b.timer.Reset(b.period)
		return
	}
	b.armed.Store(false)
	if b.users.Load() > 0 {
		b.arm() // a user came in as it stopped
	}
}

// overdue is how long past due the timer has not fired: at least how
// long, of late, this process has not run its timers (nor, likely, its
// readers). Silence that long is not a master's: a master silent for far
// longer still is (a process always a few milliseconds late must not
// excuse a master hung for seconds).
func (b *beat) overdue() time.Duration {
	if !b.armed.Load() {
		return 0
	}
	return max(b.s.mono()-time.Duration(b.due.Load()), 0)
}

// stop stops the timer; call it once no user is left.
func (b *beat) stop() { b.timer.Stop() }
