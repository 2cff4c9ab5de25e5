package sim

import (
	"container/heap"
	"sync"
	"testing/synctest"
	"time"
)

// The wire: every delivery of a run's network (a request reaching a
// master, a reply or a broken connection reaching the Client, a
// transport giving a command up, a release notice) is an event on one
// queue, run by one goroutine in the order of its virtual time and, at
// one instant, of a key the link draws from the seed. Before each event
// the wire waits until every other goroutine of the bubble is blocked
// (synctest.Wait): what the previous event, or a timer of the library
// due at the same instant, set going has finished, so the order in which
// the simulation's own deliveries meet the library no longer depends on
// Go's scheduler. (With time.AfterFunc, every delivery ran on a goroutine
// of its own and those due at one instant ran in no fixed order.)
//
// A reply that comes at its command's deadline to the nanosecond
// (weather's AtDeadline) meets the caller's timer of that instant. On a
// racing wire (one run in two, from the seed) it races it: it starts at
// once, beside the library's timers of the instant, on a goroutine of its
// own, and who wins is the scheduler's, as on a real network (and the
// library's code on both sides may interleave: where a decision meets a
// send). Else it comes, as the link draws, a nanosecond before the
// deadline or after whatever the timer set going: a replay of such a run
// meets the same turns.

type event struct {
	at    time.Time
	key   uint64 // the order of the events of one instant
	seq   uint64 // the order of scheduling, among equal keys
	race  bool   // runs beside the instant's other wake-ups, not after them
	f     func()
	index int // in the heap; -1 once popped or cancelled
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if !a.at.Equal(b.at) {
		return a.at.Before(b.at)
	}
	if a.key != b.key {
		return a.key < b.key
	}
	return a.seq < b.seq
}
func (h eventHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *eventHeap) Push(x any) {
	e := x.(*event)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// wire runs a run's deliveries (see above). Its zero value is not
// usable: newWire.
type wire struct {
	mu     sync.Mutex
	q      eventHeap
	seq    uint64
	closed bool
	racing bool          // replies at their deadline race the caller's timer
	wake   chan struct{} // a new first event, or the end
	done   chan struct{} // the loop returned
}

func newWire(racing bool) *wire {
	w := &wire{racing: racing, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.loop()
	return w
}

// after schedules f at d from now (at once when d <= 0), ordered by key
// among the events of its instant; race: f starts with the instant's
// other wake-ups instead of after them. The returned func cancels it
// (reporting whether it had not run yet).
func (w *wire) after(d time.Duration, key uint64, race bool, f func()) func() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	e := &event{at: time.Now().Add(max(d, 0)), key: key, seq: w.seq, race: race, f: f}
	heap.Push(&w.q, e)
	if e.index == 0 {
		w.signal()
	}
	return func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		if e.index < 0 {
			return false
		}
		heap.Remove(&w.q, e.index)
		e.index = -1
		return true
	}
}

func (w *wire) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// close ends the loop; events not run by then never run.
func (w *wire) close() {
	w.mu.Lock()
	w.closed = true
	w.signal()
	w.mu.Unlock()
	<-w.done
}

// next pops the first event due by now, or returns how long until the
// first one (0: none) and whether the wire is closed.
func (w *wire) next() (*event, time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, 0, true
	}
	if len(w.q) == 0 {
		return nil, 0, false
	}
	if d := time.Until(w.q[0].at); d > 0 {
		return nil, d, false
	}
	return heap.Pop(&w.q).(*event), 0, false
}

func (w *wire) loop() {
	defer close(w.done)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		e, d, closed := w.next()
		if closed {
			return
		}
		if e == nil {
			if d > 0 {
				t.Reset(d)
			}
			select {
			case <-t.C:
			case <-w.wake:
				t.Stop()
			}
			// Whatever else woke at this instant (the library's
			// timers, a worker's sleep) runs first, unless an event
			// races it.
			w.startRaces()
			synctest.Wait()
			continue
		}
		go e.f()
		synctest.Wait()
	}
}

// startRaces starts the racing events due now, at once.
func (w *wire) startRaces() {
	w.mu.Lock()
	var race []*event
	now := time.Now()
	for i := 0; i < len(w.q); i++ {
		if e := w.q[i]; e.race && !e.at.After(now) {
			race = append(race, e)
		}
	}
	for _, e := range race {
		heap.Remove(&w.q, e.index)
		e.index = -1
	}
	w.mu.Unlock()
	for _, e := range race {
		go e.f()
	}
}
