package stall

import (
	"time"
)

// Patience is a round's one rule for how long a master may stay silent
// before it counts as failed, for the round's collector (its replies) and
// for a chained leg's wait to be sent. A pipelined master's answer is read
// by a goroutine of this process; when the CPUs are busy with other work,
// that goroutine (and the one whose timer fired late) may not have run for
// longer than the timeout, while the master answered in time. So:
//
//   - a wait that ended gets one more per-master timeout from then,
//     however late it ended (First);
//   - a timer that fired late — this process did not run — gives the
//     readers as long again, at most a timeout (Late);
//   - a master is blamed only once it has been silent for the whole
//     timeout (More);
//   - nothing waits past Bound: the round's deadline and LateBound more.
//
// The outcome stays as sound as before: validity is counted from the
// round's start, and an answer taken later counts as it would have on
// time. See "A busy process is not a silent master" in docs/design.md.
type Patience struct {
	Timeout time.Duration // the per-master timeout
	Bound   time.Time     // the latest any wait of the round may end
}

// NewPatience returns the rule of a round whose commands are waited for
// until deadline (on whichever clock the caller measures it), with the
// per-master timeout timeout.
func NewPatience(timeout time.Duration, deadline time.Time) Patience {
	return Patience{Timeout: timeout, Bound: deadline.Add(LateBound(timeout))}
}

// First is when a wait that ended at from gives up at the earliest: one
// more timeout for the readers.
func (p Patience) First(from time.Time) time.Time { return from.Add(p.Timeout) }

// Late is how much longer to wait for the readers after a timer that
// fired late by lateBy: as long again (this process did not run, nor did
// they), at most a timeout; nothing for a timer on time.
func (p Patience) Late(lateBy time.Duration) time.Duration {
	if lateBy > time.Millisecond {
		return min(lateBy, p.Timeout)
	}
	return 0
}

// More returns how much longer to wait, from now, for masters that have
// not answered, each silent for one of silences (a transport's Silencer):
// at least allow, and what is left of a timeout's silence on any of them
// (at least a millisecond when any is left: a master that is not silent
// may have answered, its reader not yet run); never past until nor
// Bound. 0: count them as failed now.
func (p Patience) More(now, until time.Time, allow time.Duration, silences ...time.Duration) time.Duration {
	if p.Bound.Before(until) {
		until = p.Bound
	}
	room := until.Sub(now)
	if room <= 0 {
		return 0
	}
	more := max(allow, 0)
	for _, s := range silences {
		if left := p.Timeout - s; left > more {
			more = max(left, time.Millisecond)
		}
	}
	return min(more, room)
}
