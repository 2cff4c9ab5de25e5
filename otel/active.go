package otel

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// DefaultMaxActiveLocks is how many locks an Observer keeps for the
// active locks gauge unless WithMaxActiveLocks says otherwise.
const DefaultMaxActiveLocks = 100_000

// WithMaxActiveLocks bounds the locks the Observer keeps for the gauge
// quorumlock.locks.active (n > 0; default DefaultMaxActiveLocks, about
// 100 bytes each). Locks whose validity ended are dropped as soon as
// another lock is acquired or the gauge is collected; should more than n
// still be valid, those whose validity ends first are dropped early, and
// the gauge counts too few.
func WithMaxActiveLocks(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxActive = n
		}
	}
}

// activeLocks are the locks whose validity has not ended, as the events
// reported them: by lock ID, and in a min-heap by the end of their
// validity on the observer's clock, so that the ended ones are dropped
// without a timer per lock; and their number by attribute set.
type activeLocks struct {
	mu     sync.Mutex
	max    int
	now    func() time.Time
	byID   map[uint64]*activeLock
	heap   lockHeap
	counts map[attribute.Distinct]*activeCount
}

type activeLock struct {
	id    uint64
	until time.Time // on the observer's clock (monotonic)
	count *activeCount
	index int // in the heap
}

// activeCount is the number of active locks of one attribute set. Sets
// seen once are kept (reported as 0 when none is active): there are as
// few as the series of the other lock metrics.
type activeCount struct {
	n    int64
	opts []metric.ObserveOption
}

func newActiveLocks(limit int) *activeLocks {
	return &activeLocks{max: limit, now: time.Now, byID: make(map[uint64]*activeLock),
		counts: make(map[attribute.Distinct]*activeCount)}
}

// add counts lock id, valid for validity from now, under set.
func (a *activeLocks) add(id uint64, validity time.Duration, set attribute.Set) {
	if id == 0 || validity <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	a.prune(now)
	if l := a.byID[id]; l != nil {
		l.until = now.Add(validity)
		heap.Fix(&a.heap, l.index)
		return
	}
	for len(a.byID) >= a.max {
		a.remove(a.heap[0])
	}
	cnt := a.counts[set.Equivalent()]
	if cnt == nil {
		cnt = &activeCount{opts: []metric.ObserveOption{metric.WithAttributeSet(set)}}
		a.counts[set.Equivalent()] = cnt
	}
	l := &activeLock{id: id, until: now.Add(validity), count: cnt}
	cnt.n++
	a.byID[id] = l
	heap.Push(&a.heap, l)
}

// update sets lock id's validity, if it is counted: it leaves the count
// when validity ≤ 0.
func (a *activeLocks) update(id uint64, validity time.Duration) (found bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.byID[id]
	if l == nil {
		return false
	}
	if validity <= 0 {
		a.remove(l)
		return true
	}
	l.until = a.now().Add(validity)
	heap.Fix(&a.heap, l.index)
	return true
}

// end drops lock id (released or lost), if it is counted.
func (a *activeLocks) end(id uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := a.byID[id]; l != nil {
		a.remove(l)
	}
}

// prune drops the locks whose validity ended by now. The caller holds mu.
func (a *activeLocks) prune(now time.Time) {
	for len(a.heap) > 0 && !now.Before(a.heap[0].until) {
		a.remove(a.heap[0])
	}
}

// remove drops l. The caller holds mu.
func (a *activeLocks) remove(l *activeLock) {
	heap.Remove(&a.heap, l.index)
	delete(a.byID, l.id)
	l.count.n--
}

// observe reports the count of each attribute set, after dropping the
// locks whose validity ended.
func (a *activeLocks) observe(_ context.Context, o metric.Observer, inst metric.Int64Observable) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.prune(a.now())
	for _, cnt := range a.counts {
		o.ObserveInt64(inst, cnt.n, cnt.opts...)
	}
	return nil
}

// lockHeap orders locks by the end of their validity (container/heap).
type lockHeap []*activeLock

func (h lockHeap) Len() int           { return len(h) }
func (h lockHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h lockHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *lockHeap) Push(x any) {
	l := x.(*activeLock)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *lockHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return l
}
