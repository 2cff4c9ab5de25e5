package redlock

import (
	"sync/atomic"

	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/layout"
)

// fairness is the fair lock's kind (WithFair): a waiter's place in the
// queue of the key, which every attempt refreshes and a waiter that gives
// up leaves. Only the head of the queue can win.
type fairness struct {
	baseKind
	queue, deadlines string // companion keys, in the lock key's hash slot
	waiter           string // stable across the attempts of one Acquire
	arrival          int64  // µs since the epoch: the queue's order
	entryTTLms       int64  // an entry not refreshed for this long is dropped
}

// fairness returns the waiter's place for one Acquire of key. The entry outlives the longest backoff several times over,
// since every attempt refreshes it.
func (c *Client) fairness(key string, lc *lockConfig) *fairness {
	entry := c.entryTTL(lc)
	return &fairness{
		queue:      layout.QueueKey(key),
		deadlines:  layout.QueueDeadlinesKey(key),
		waiter:     c.jit.UUID(),
		arrival:    c.arrival(),
		entryTTLms: entry.Milliseconds(),
	}
}

// arrival returns a new fair waiter's arrival: the clock's microsecond,
// or one past the client's previous arrival when that is not before it.
// The masters order equal arrivals by waiter ID, the client its waiters
// by arrival: two of one client's waiters in one microsecond would
// otherwise be ordered one way here and maybe the other way there, and a
// notice would wake the one that cannot win.
func (c *Client) arrival() int64 { return nextArrival(&c.lastArrival, c.clock.Now().UnixMicro()) }

// nextArrival returns now, or one past *last when that is not before it,
// and records it in *last.
func nextArrival(last *atomic.Int64, now int64) int64 {
	for {
		l := last.Load()
		a := max(now, l+1)
		if last.CompareAndSwap(l, a) {
			return a
		}
	}
}

var _ kind = (*fairness)(nil)

func (f *fairness) command(r *round, op opKind, dst []any) (*scripts.Script, string, []any) {
	key, token := r.key, r.token
	switch op {
	case opAcquire:
		if r.fence != nil {
			return scripts.FairFencedAcquire, "", append(dst, key, f.queue, f.deadlines, r.fence.counter, token, r.ttlMS, f.waiter, f.arrival, f.entryTTLms)
		}
		return scripts.FairAcquire, "", append(dst, key, f.queue, f.deadlines, token, r.ttlMS, f.waiter, f.arrival, f.entryTTLms)
	case opExtend:
		return scripts.Extend, "", append(dst, key, token, r.ttlMS)
	case opRelease:
		return scripts.FairRelease, "", append(dst, key, f.queue, f.deadlines, token, wakeChannel(key), f.waiter)
	case opRollback:
		// Not announced (see plainKind); the waiter keeps its place in
		// the queue.
		return scripts.Release, "", append(dst, key, token, "")
	default: // opLeave, announced when the key is free and a waiter remains (leave.lua)
		return scripts.Leave, "", append(dst, f.queue, f.deadlines, key, f.waiter, wakeChannel(key))
	}
}

func (f *fairness) holder() string { return "f:" + f.waiter }
func (f *fairness) leaves() bool   { return true }
func (f *fairness) queued() bool   { return true }

// arrivalOf returns a fair waiter's arrival (its place in the key's
// queue), or 0 for a lock of any other kind.
func arrivalOf(k kind) int64 {
	if mk, ok := k.(*metaKind); ok {
		k = mk.kind
	}
	if f, ok := k.(*fairness); ok {
		return f.arrival
	}
	return 0
}
