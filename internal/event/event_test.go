package event

import (
	"slices"
	"sync"
	"testing"
	"unsafe"
)

func TestEvent_waitersRunAtFireInTheOrderTheyWaited(t *testing.T) {
	var e Event
	var got []int
	for i := range 3 {
		e.Then(func() { got = append(got, i) })
	}
	if len(got) != 0 {
		t.Fatalf("ran before Fire: %v", got)
	}
	e.Fire()
	if !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("ran %v, want [0 1 2]", got)
	}
	e.Fire()
	if len(got) != 3 {
		t.Fatalf("a second Fire ran the waiters again: %v", got)
	}
}

func TestEvent_thenAfterFireRunsAtOnce(t *testing.T) {
	var e Event
	e.Fire()
	ran := false
	e.Then(func() { ran = true })
	if !ran {
		t.Fatal("Then on a fired event did not run f at once")
	}
}

func TestEvent_waiterMayWaitAgainWhileItRuns(t *testing.T) {
	var e Event
	var got []string
	e.Then(func() {
		got = append(got, "first")
		e.Then(func() { got = append(got, "nested") })
	})
	e.Fire()
	if !slices.Equal(got, []string{"first", "nested"}) {
		t.Fatalf("ran %v", got)
	}
}

func TestEvent_concurrentThenAndFireRunEachWaiterOnce(t *testing.T) {
	var e Event
	var mu sync.Mutex
	runs := make(map[int]int)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.Then(func() {
				mu.Lock()
				runs[i]++
				mu.Unlock()
			})
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.Fire()
	}()
	wg.Wait()
	e.Fire()
	for i := range 50 {
		if runs[i] != 1 {
			t.Fatalf("waiter %d ran %d times", i, runs[i])
		}
	}
}

func TestEvent_staysSmall(t *testing.T) {
	// Two in every leg of every round.
	if s := unsafe.Sizeof(Event{}); s > 24 {
		t.Fatalf("Event is %d bytes, want at most 24", s)
	}
}
