package sim

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestWire_runsAnInstantsEventsInKeyOrderEachSettled schedules events
// due at one instant from goroutines that start in no fixed order: they
// run in the order of their keys, each only after what the one before it
// set going (a goroutine that records later) has finished, and a
// cancelled one never runs.
func TestWire_runsAnInstantsEventsInKeyOrderEachSettled(t *testing.T) {
	for range 20 {
		synctest.Test(t, func(t *testing.T) {
			w := newWire(false)
			defer w.close()
			var mu sync.Mutex
			var got []uint64
			record := func(k uint64) {
				mu.Lock()
				got = append(got, k)
				mu.Unlock()
			}
			keys := []uint64{5, 3, 9, 1, 7}
			var wg sync.WaitGroup
			for _, k := range keys {
				wg.Go(func() {
					w.after(time.Millisecond, k, false, func() {
						record(k)
						// A consequence on another goroutine, after a
						// hand-off: it must come before the next event.
						ch := make(chan struct{})
						go func() { <-ch; record(k + 100) }()
						ch <- struct{}{}
					})
				})
			}
			wg.Wait()
			cancel := w.after(time.Millisecond, 4, false, func() { record(4) })
			if !cancel() {
				t.Fatal("cancel: the event had run already")
			}
			time.Sleep(2 * time.Millisecond) // the subject: the bubble's clock passes the events' instant
			synctest.Wait()
			want := []uint64{1, 101, 3, 103, 5, 105, 7, 107, 9, 109}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(got, want) {
				t.Fatalf("ran %v, want %v", got, want)
			}
		})
	}
}

// TestWire_racingReplyStartsBesideTheInstantsTimer: a racing event starts
// before the wire waits for what a timer of its instant woke, so the two
// run together; a settled one runs after it.
func TestWire_racingReplyStartsBesideTheInstantsTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWire(true)
		defer w.close()
		timerDone := make(chan struct{})
		timer := time.AfterFunc(time.Millisecond, func() {
			// The library's side of the race: it waits for the racing
			// delivery, which must have started beside it.
			<-timerDone
		})
		defer timer.Stop()
		var settledSawTimer bool
		w.after(time.Millisecond, 1, true, func() { close(timerDone) })
		w.after(time.Millisecond, 0, false, func() {
			select {
			case <-timerDone:
				settledSawTimer = true
			default:
			}
		})
		time.Sleep(2 * time.Millisecond) // the subject: the bubble's clock passes the instant
		synctest.Wait()
		if !settledSawTimer {
			t.Fatal("the settled event ran before the racing one")
		}
	})
}
