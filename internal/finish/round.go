package finish

import (
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/event"
)

// Round is one round's share of the finisher's state: whether a later
// round of the same reentrant owner superseded it, when its retries end,
// the retries of it in flight, and the masters its acquisition certainly
// never reached. The zero value is a round that no retry has touched yet.
// A Round must not be copied; the core keeps one in each of its rounds.
type Round struct {
	// superseded: a later round of the same reentrant owner has started;
	// this round's retries are dropped. Set under Finisher.gate.
	superseded atomic.Bool
	// until, for a reentrant owner's round: its retries end by then.
	until time.Time
	// busy (transports that are not Ordered; allocated under
	// Finisher.gate): per master, the retry in flight there, which fires
	// when it ends.
	busy []atomic.Pointer[event.Event]
	// after (transports that are not Ordered): per master, a retry of a
	// superseded round still in flight, which this round's leg waits for
	// before it sends anything. Set under Finisher.gate before the round
	// starts its legs.
	after []*event.Event
	// unsent: bit i set when the acquisition's command certainly never
	// left for master i (no connection, no time left): its rollback there
	// needs no retry.
	unsent atomic.Uint64
}

// MarkUnsent records that the round's acquisition command certainly never
// left for master i. The caller calls it for an acquisition only. Safe
// for concurrent use.
func (rf *Round) MarkUnsent(i int) {
	if i >= 64 {
		return
	}
	for {
		old := rf.unsent.Load()
		if rf.unsent.CompareAndSwap(old, old|1<<i) {
			return
		}
	}
}

// UnsentAt reports whether the acquisition's command certainly never left
// for master i (MarkUnsent). Safe for concurrent use.
func (rf *Round) UnsentAt(i int) bool { return i < 64 && rf.unsent.Load()&(1<<i) != 0 }

// WaitAfter returns the retry of a superseded round in flight on master
// i, which fires when it ends, or nil (transports that are not Ordered):
// the round's leg there sends nothing before it fired. Call it once the
// round started (after Supersede).
func (rf *Round) WaitAfter(i int) *event.Event {
	if rf.after == nil {
		return nil
	}
	return rf.after[i]
}

// Newest records r as the newest round of the reentrant owner id and
// returns the owner's previous one, whose retries r supersedes
// (Supersede), or nil. It sets r's end of retries: ttl, plus what a
// command of r may wait before it fails for good, from now.
//
// The owners are guarded by the caller's lock, not the finisher's: the
// caller holds the one lock it starts its rounds under (Client.mu) across
// every call of Newest and Owners, and Newest takes no lock of the
// finisher.
func (f *Finisher) Newest(id string, r *Round, ttl time.Duration) *Round {
	now := time.Now()
	// A command of r fails for good within the silence bound of a
	// pipelined connection, or within a few per-master timeouts on the
	// pooled path; its retries end a TTL later at the latest.
	r.until = now.Add(ttl + 12*f.timeout + time.Second)
	if f.owners == nil {
		f.owners = make(map[string]*Round)
	}
	old := f.owners[id]
	f.owners[id] = r
	if len(f.owners) >= f.sweepAt {
		// Past its until, and a per-master timeout more for a pooled
		// retry sent just before it, a round has no retry left.
		for k, o := range f.owners {
			if o.until.Add(2 * f.timeout).Before(now) {
				delete(f.owners, k)
			}
		}
		f.sweepAt = max(64, 2*len(f.owners))
	}
	return old
}

// Owners reports how many reentrant owners' newest rounds the finisher
// keeps (Newest). The caller holds the lock it calls Newest under.
func (f *Finisher) Owners() int { return len(f.owners) }

// Supersede drops the retries of old, a reentrant owner's previous round,
// before r (the owner's next) sends anything. On a transport that is not
// Ordered, r's legs wait for a retry of old still in flight (WaitAfter).
// It takes the gate: the caller holds none of the finisher's locks, nor
// its own lock (Client.mu).
func (f *Finisher) Supersede(old, r *Round) {
	f.gate.Lock()
	old.superseded.Store(true)
	for i := range old.busy {
		if e := old.busy[i].Load(); e != nil {
			if r.after == nil {
				r.after = make([]*event.Event, len(old.busy))
			}
			r.after[i] = e
		}
	}
	f.gate.Unlock()
}
