package redlock

import (
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/event"
)

// roundFin is a round's share of the finisher's state.
type roundFin struct {
	// superseded: a later round of the same reentrant owner has started;
	// this round's retries are dropped. Set under finisher.gate.
	superseded atomic.Bool
	// until, for a reentrant owner's round: its retries end by then.
	until time.Time
	// busy (transports that are not Ordered; allocated under
	// finisher.gate): per master, the retry in flight there, which fires
	// when it ends.
	busy []atomic.Pointer[event.Event]
	// after (transports that are not Ordered): per master, a retry of a
	// superseded round still in flight, which this round's leg waits for
	// before it sends anything. Set under finisher.gate before the round
	// starts its legs.
	after []*event.Event
	// unsent: bit i set when the acquisition's command certainly never
	// left for master i (no connection, no time left): its rollback there
	// needs no retry.
	unsent atomic.Uint64
	// placers, for a lock's release: the lock's rounds that may have put
	// its token on a master (Lock.placers). Set by Lock.Release once the
	// round started, so that the finisher, when it queues, sends or gives
	// up a retry, can tell a master that none of them reached: the
	// release leaves nothing there, and needs no retry nor warning.
	placers atomic.Pointer[[]*round]
}

// nothingAt reports whether r is a release of a lock none of whose rounds
// put its token on master i, as far as is known now. Not under
// finisher.mu: it takes the rounds' mu.
func (rf *roundFin) nothingAt(i int) bool {
	ps := rf.placers.Load()
	if ps == nil {
		return false
	}
	for _, p := range *ps {
		if !p.neverPlacedAt(i) {
			return false
		}
	}
	return true
}

// neverPlacedAt reports whether r, an acquisition or a reentrant owner's
// round taking the lock again, certainly did not put its token on master
// i: refused there, skipped (a led attempt), or never sent. Those
// outcomes are final.
func (r *round) neverPlacedAt(i int) bool {
	if r.fin.unsentAt(i) {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.legs[i].placedNothingLocked()
}

// markUnsent records that op, if it is the acquisition, never left for
// master i.
func (rf *roundFin) markUnsent(op opKind, i int) {
	if op == opAcquire && i < 64 {
		setBit(&rf.unsent, i)
	}
}

// unsentAt reports whether the acquisition's command certainly never left
// for master i (markUnsent).
func (rf *roundFin) unsentAt(i int) bool { return i < 64 && rf.unsent.Load()&(1<<i) != 0 }

// waitAfter returns the retry of a superseded round in flight on master
// i, which fires when it ends, or nil (transports that are not Ordered).
func (rf *roundFin) waitAfter(i int) *event.Event {
	if rf.after == nil {
		return nil
	}
	return rf.after[i]
}

// newest records r as the newest round of the reentrant owner id and
// returns the owner's previous one, whose retries r supersedes. The
// caller holds Client.mu.
func (f *finisher) newest(c *Client, id string, r *round, ttl time.Duration) *round {
	now := time.Now()
	// A command of r fails for good within the silence bound of a
	// pipelined connection, or within a few per-master timeouts on the
	// pooled path; its retries end a TTL later at the latest.
	r.fin.until = now.Add(ttl + 12*c.timeout + time.Second)
	if f.owners == nil {
		f.owners = make(map[string]*round)
	}
	old := f.owners[id]
	f.owners[id] = r
	if len(f.owners) >= f.sweepAt {
		// Past its until, and a per-master timeout more for a pooled
		// retry sent just before it, a round has no retry left.
		for k, o := range f.owners {
			if o.fin.until.Add(2 * c.timeout).Before(now) {
				delete(f.owners, k)
			}
		}
		f.sweepAt = max(64, 2*len(f.owners))
	}
	return old
}

// supersede drops the retries of old, a reentrant owner's previous round,
// before r (the owner's next) sends anything. On a transport that is not
// Ordered, r's legs wait for a retry of old still in flight.
func (f *finisher) supersede(old, r *round) {
	f.gate.Lock()
	old.fin.superseded.Store(true)
	for i := range old.fin.busy {
		if e := old.fin.busy[i].Load(); e != nil {
			if r.fin.after == nil {
				r.fin.after = make([]*event.Event, len(old.fin.busy))
			}
			r.fin.after[i] = e
		}
	}
	f.gate.Unlock()
}
