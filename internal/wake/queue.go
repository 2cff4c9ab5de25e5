package wake

import (
	"math/bits"
	"slices"

	"github.com/quorumlock/quorumlock/internal/keys"
)

// Queue is one key's waiters in one client, longest waiting first (fair
// waiters by arrival), and the releases of the key recently announced.
// The zero value is an empty queue with no master asked.
type Queue struct {
	waiters  []*Waiter
	releases Releases
	// asked is the master the latest piloted attempt of a waiter of the
	// key asked first, plus one (0: none yet).
	asked int
	// rivals is how many clients waited on the master of the latest
	// notice, by that notice; 0: not told.
	rivals int
}

// Len returns how many waiters the queue holds.
func (q *Queue) Len() int { return len(q.waiters) }

// Add puts a new waiter of kind k at the back of the queue, or, when it is
// fair (arrival ≠ 0), at its place by arrival: a fair waiter that arrived
// earlier may register later (its first attempt took longer).
func (q *Queue) Add(key string, ch chan struct{}, k Kind, arrival int64) *Waiter {
	w := &Waiter{Key: key, Ch: ch, Kind: k, Arrival: arrival}
	q.waiters = append(q.waiters, w)
	if arrival != 0 {
		for i := len(q.waiters) - 1; i > 0 && q.waiters[i-1].Arrival > arrival; i-- {
			q.waiters[i-1], q.waiters[i] = q.waiters[i], q.waiters[i-1]
		}
	}
	return w
}

// Remove takes w out of the queue and hands on what it leaves (Leave):
// the next waiter is woken when it passes a notice on. It reports whether
// the notice w gives up counts as heard (nobody left to pass it to).
func (q *Queue) Remove(w *Waiter, acquired bool) (heard bool) {
	q.waiters = slices.DeleteFunc(q.waiters, func(x *Waiter) bool { return x == w })
	passOn, heard := Leave(w, acquired, q.waiters)
	if passOn {
		q.WakeNext()
	}
	return heard
}

// Trying records that w, woken by a notice of its key, begins its attempt
// on the key; Tried records its end. The notices that crossed it since its
// wake-up count (Decision.Crossed); without one pending, none does.
func (q *Queue) Trying(w *Waiter) {
	w.crossed = w.crossed && w.pending
	w.pending, w.trying = false, true
	w.heirVotes = 0
}

// Tried records the end of w's attempt, begun with Trying (undone: it
// failed, its grants rolled back; see wake.Tried), and hands on what it
// leaves: the next waiter is woken when the attempt's grants were undone
// after a notice woke another waiter meanwhile.
func (q *Queue) Tried(w *Waiter, undone bool) {
	passOn := Tried(w, undone)
	w.trying, w.crossed = false, false
	if passOn {
		q.WakeNext()
	}
}

// Asking records that a woken attempt of a waiter of the key alone asks
// master first (Notice.FromAsked).
func (q *Queue) Asking(master int) { q.asked = master + 1 }

// Rivals returns how many clients waited, by the latest notice, on the
// master that sent it (0: not known).
func (q *Queue) Rivals() int { return q.rivals }

// Notify applies master from's notice msg (the release's id, and
// optionally how many clients were subscribed there) to the queue: it
// counts the notice, wakes whom Decide says, and reports whether the
// notice counts as heard (Decision.Heard). pilot is the key's pilot now
// (-1: none) and quorum the Client's.
func (q *Queue) Notify(msg string, from, pilot, quorum int) (heard bool) {
	id, rivals := keys.ParseNotice(msg)
	q.rivals = rivals
	id, named, cand := keys.ParseHandOver(id)
	n := q.releases.Heard(id, from == pilot)
	n.Quorum, n.FromAsked, n.Heir, n.Candidate = quorum, q.asked != 0 && from == q.asked-1, named, cand
	if named != "" {
		if i := heir(q.waiters, named); i >= 0 {
			w := q.waiters[i]
			if from >= 0 && from < 64 {
				w.heirVotes |= 1 << from
			}
			n.HeirVotes = bits.OnesCount64(w.heirVotes)
		}
	}
	d := Decide(q.waiters, n)
	for i, w := range q.waiters {
		if d.Crossed(q.waiters, i) {
			w.crossed = true
		}
	}
	if d.One >= 0 {
		q.wakeAt(d.One, d.Back).Heir = d.Heir
	}
	if d.Multi {
		for _, w := range q.waiters {
			if w.Kind == Multi {
				wake(w)
			}
		}
	}
	return d.Heard
}

// WakeNext wakes the waiter a wake-up of the key alone goes to (Next) and
// sends it to the back of the queue unless it is fair; it returns it, or
// nil when none waits for this key alone.
func (q *Queue) WakeNext() *Waiter {
	i := Next(q.waiters)
	if i < 0 {
		return nil
	}
	return q.wakeAt(i, q.waiters[i].Kind != Fair)
}

func (q *Queue) wakeAt(i int, back bool) *Waiter {
	w := q.waiters[i]
	if back {
		copy(q.waiters[i:], q.waiters[i+1:])
		q.waiters[len(q.waiters)-1] = w
	}
	wake(w)
	return w
}

// wake hands a wake-up to w, in its place.
func wake(w *Waiter) {
	w.Woken, w.pending = true, true
	select {
	case w.Ch <- struct{}{}:
	default:
	}
}
