// Package stall is a Client's process-stall detector, shared by its
// rounds and its transports.
//
// A process stall is a time this process did not run: the CPUs were busy
// with other work, or it was stopped. Its readers read nothing then, so
// every master looks silent, and its timers fire late, all at once, when
// it runs again. A timer that fired late is the evidence: Note keeps the
// latest, and what judges a master by its silence takes that stall off
// (In), so a master whose answers waited in the socket while this process
// did not run is not counted down for it.
//
// It also holds how long a round waits for its masters given such
// stalls: Patience, a round's rule for a silent master, and Bound, a
// Client's per-master wait (the adaptive bound, a release's wait). It
// knows nothing of locks, rounds or transports beyond the durations and
// master indexes its callers pass, and imports only clock of this module.
package stall

import (
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/clock"
)

// Stalls is one Client's detector: its rounds' timers and its
// transports' beats feed it, its transports' silences read it. It reads
// the Client's clock; on any clock but clock.Real() the lateness of a
// timer is not this process's, and the detector sees no stall, arms no
// timer. Close stops it (Stop). A nil *Stalls sees no stall.
type Stalls struct {
	clk    clock.Clock
	real   bool      // clk is clock.Real(): its timers' lateness is this process's
	start  time.Time // the monotonic reference of mono: a step of the wall clock is no stall
	last   atomic.Pointer[stallMark]
	Rounds *Beat // beats while some round of the client waits for its masters (collect, askRunIDs)
}

// stallMark is one stall: when it ended and how long it lasted, at least.
type stallMark struct {
	end time.Time     // when the late timer fired: the process ran again
	len time.Duration // how late it fired: how long, at least, it did not run
}

// New returns the stall detector of a Client on clk.
func New(clk clock.Clock) *Stalls {
	s := &Stalls{clk: clk, real: clk == clock.Real(), start: clk.Now()}
	s.Rounds = s.NewBeat(5 * time.Millisecond)
	return s
}

// LateBound is how long past a round's deadline a stall of this process
// is waited out — a reply read late, a chained command held back, collect
// waiting on: one per-master timeout, at least a second. A stall longer
// than that fails what it delays, as a hung master would.
func LateBound(timeout time.Duration) time.Duration {
	return max(timeout, time.Second)
}

// Note records that a timer due at due fired at now, when it fired over a
// millisecond late. Timers that fire together when the process runs again
// saw the same stall, each from when it was due: the one due earliest saw
// the most of it, and its record is kept.
func (s *Stalls) Note(due, now time.Time) {
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

// In returns how much of the window of length d that ends at now this
// process spent in the latest stall it saw.
func (s *Stalls) In(now time.Time, d time.Duration) time.Duration {
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

// Behind is how far this process is behind on the timers of its rounds
// (the round beat's overdue): a stall no timer has told of yet.
func (s *Stalls) Behind() time.Duration {
	if s == nil {
		return 0
	}
	return s.Rounds.Overdue()
}

// mono is the time since start, on the monotonic clock.
func (s *Stalls) mono() time.Duration { return s.clk.Now().Sub(s.start) }

// monoTime is the time d after start, with its monotonic reading.
func (s *Stalls) monoTime(d time.Duration) time.Time { return s.start.Add(d) }

// Stop stops the round beat; the Client's Close calls it once no round
// is left.
func (s *Stalls) Stop() { s.Rounds.Stop() }

// Beat tells how far this process is behind: a timer that fires every
// period while its users are in (enter, leave). When it has not fired for
// well over a period (overdue), this process has not run its timers, nor,
// likely, its readers — evidence of a stall that does not wait for a late
// timer to fire first, which matters right after the process runs again:
// a goroutine may then look at a master before any timer or reader has
// run. Each time it fires late, it records the stall (stalls.note). On a
// detector that is not on the real clock it is never armed.
type Beat struct {
	s      *Stalls
	period time.Duration
	users  atomic.Int64
	armed  atomic.Bool
	due    atomic.Int64 // when the timer is due, as stalls.mono()
	timer  *time.Timer
}

// NewBeat returns a beat of period that records its stalls in s.
func (s *Stalls) NewBeat(period time.Duration) *Beat {
	b := &Beat{s: s, period: period}
	b.timer = time.AfterFunc(time.Hour, b.tick)
	b.timer.Stop()
	return b
}

// Enter counts a user in, arming the timer for the first.
func (b *Beat) Enter() {
	b.users.Add(1)
	b.arm()
}

// Leave counts a user out; the timer stops at its next tick.
func (b *Beat) Leave() { b.users.Add(-1) }

func (b *Beat) arm() {
	if b.s.real && b.armed.CompareAndSwap(false, true) {
		b.due.Store(int64(b.s.mono() + b.period))
		b.timer.Reset(b.period)
	}
}

func (b *Beat) tick() {
	now := b.s.mono()
	b.s.Note(b.s.monoTime(time.Duration(b.due.Load())), b.s.monoTime(now))
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

// Overdue is how long past due the timer has not fired: at least how
// long, of late, this process has not run its timers (nor, likely, its
// readers). Silence that long is not a master's: a master silent for far
// longer still is (a process always a few milliseconds late must not
// excuse a master hung for seconds).
func (b *Beat) Overdue() time.Duration {
	if !b.armed.Load() {
		return 0
	}
	return max(b.s.mono()-time.Duration(b.due.Load()), 0)
}

// Stop stops the timer; call it once no user is left.
func (b *Beat) Stop() { b.timer.Stop() }

// Clock is the clock the detector reads: the Client's.
func (s *Stalls) Clock() clock.Clock { return s.clk }

// Last is the latest stall seen: when it ended and how long it lasted, at
// least; ok is false when none was seen.
func (s *Stalls) Last() (end time.Time, d time.Duration, ok bool) {
	m := s.last.Load()
	if m == nil {
		return time.Time{}, 0, false
	}
	return m.end, m.len, true
}

// Users is how many users are in (Enter, not yet Leave).
func (b *Beat) Users() int64 { return b.users.Load() }

// SetBehind makes b look overdue by late (armed, its timer not running),
// for tests; restore puts back its state.
func (b *Beat) SetBehind(late time.Duration) (restore func()) {
	armed, due := b.armed.Load(), b.due.Load()
	b.armed.Store(true)
	b.due.Store(int64(b.s.mono() - late))
	return func() {
		b.due.Store(due)
		b.armed.Store(armed)
	}
}
