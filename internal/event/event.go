// Package event is a one-shot event whose waiters run when it fires, on
// the goroutine that fires it: the core's legs wait for each other with
// it (a leg chained after another on a master is sent from that leg's
// end), without a goroutine or a channel of their own.
package event

import (
	"sync"
)

// Event fires once; what waits for it runs then (on the goroutine that
// fires it), or at once when it already has. It is 24 bytes, two in every
// leg: what waits is a list, made by Then. The zero value is an Event
// that has not fired.
type Event struct {
	mu    sync.Mutex // a leaf: nothing is locked or run while it is held
	fired bool
	fns   *thenFn // the latest Then first
}

// thenFn is one function waiting for an Event.
type thenFn struct {
	f    func()
	next *thenFn
}

// Then runs f when e fires (at once if it has).
func (e *Event) Then(f func()) {
	e.mu.Lock()
	if e.fired {
		e.mu.Unlock()
		f()
		return
	}
	e.fns = &thenFn{f: f, next: e.fns}
	e.mu.Unlock()
}

// Fired reports whether e has fired.
func (e *Event) Fired() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fired
}

// Fire fires e, once, and runs what waited for it, in the order Then was
// called.
func (e *Event) Fire() {
	e.mu.Lock()
	if e.fired {
		e.mu.Unlock()
		return
	}
	e.fired = true
	fns := e.fns
	e.fns = nil
	e.mu.Unlock()
	var first *thenFn // fns reversed
	for fns != nil {
		next := fns.next
		fns.next, first = first, fns
		fns = next
	}
	for ; first != nil; first = first.next {
		first.f()
	}
}
