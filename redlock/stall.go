package redlock

import (
	"sync/atomic"
	"time"
)

// A process stall is a time this process did not run: the CPUs were busy
// with other work, or it was stopped. Its readers read nothing then, so
// every master looks silent, and its timers fire late, all at once, when
// it runs again. A timer that fired late is the evidence: noteStall keeps
// the latest, and what judges a master by its silence takes that stall
// off (stallIn), so a master whose answers waited in the socket while
// this process did not run is not counted down for it.
type stallMark struct {
	end time.Time     // when the late timer fired: the process ran again
	len time.Duration // how late it fired: how long, at least, it did not run
}

// lastStall is the latest stall any timer of this process saw.
var lastStall atomic.Pointer[stallMark]

// lateBound is how long past a round's deadline a stall of this process
// is waited out — a reply read late, a chained command held back, collect
// waiting on: one per-master timeout, at least a second. A stall longer
// than that fails what it delays, as a hung master would.
func lateBound(timeout time.Duration) time.Duration {
	return max(timeout, time.Second)
}

// roundBeat beats while some round of a client on the real clock waits
// for its masters (collect).
var roundBeat = newBeat(5 * time.Millisecond)

// noteStall records that a timer due at due fired at now (real time),
// when it fired over a millisecond late. Timers that fire together when
// the process runs again saw the same stall, each from when it was due:
// the one due earliest saw the most of it, and its record is kept.
func noteStall(due, now time.Time) {
	if now.Sub(due) <= time.Millisecond {
		return
	}
	for {
		m := lastStall.Load()
		if m != nil {
			apart := now.Sub(m.end)
			if apart < 2*time.Millisecond && apart > -2*time.Millisecond && !m.end.Add(-m.len).After(due) {
				return // the same stall, already seen from earlier
			}
		}
		if lastStall.CompareAndSwap(m, &stallMark{end: now, len: now.Sub(due)}) {
			return
		}
	}
}

// stallIn returns how much of the window of length d that ends at now
// this process spent in the latest stall it saw.
func stallIn(now time.Time, d time.Duration) time.Duration {
	m := lastStall.Load()
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

// beat tells how far this process is behind: a timer that fires every
// period while its users are in (enter, leave). When it has not fired for
// well over a period (overdue), this process has not run its timers, nor, likely,
// its readers — evidence of a stall that does not wait for a late timer
// to fire first, which matters right after the process runs again: a
// goroutine may then look at a master before any timer or reader has run.
// Each time it fires late, it records the stall (noteStall).
type beat struct {
	period time.Duration
	users  atomic.Int64
	armed  atomic.Bool
	due    atomic.Int64 // when the timer is due, as mono() (a monotonic reading)
	timer  *time.Timer
}

func newBeat(period time.Duration) *beat {
	b := &beat{period: period}
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
	if b.armed.CompareAndSwap(false, true) {
		b.due.Store(int64(mono() + b.period))
		b.timer.Reset(b.period)
	}
}

func (b *beat) tick() {
	now := mono()
	noteStall(monoTime(time.Duration(b.due.Load())), monoTime(now))
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
	return max(mono()-time.Duration(b.due.Load()), 0)
}

// procStart is a monotonic reference: mono and monoTime measure from it,
// so that a step of the wall clock is not taken for a stall.
var procStart = time.Now()

// mono is the time since procStart, on the monotonic clock.
func mono() time.Duration { return time.Since(procStart) }

// monoTime is the time d after procStart, with its monotonic reading.
func monoTime(d time.Duration) time.Time { return procStart.Add(d) }

// stop stops the timer; call it once no user is left.
func (b *beat) stop() { b.timer.Stop() }
