package redlock

import (
	"testing"

	"github.com/quorumlock/quorumlock/internal/waker"
	"github.com/quorumlock/quorumlock/layout"
)

// newSlotWaiters returns a semaphore of k on a waker that follows no
// master (closed: registering subscribes nothing), and n of its waiters,
// registered in order.
func newSlotWaiters(k, n int) (*Semaphore, []*waker.Waiting) {
	w := waker.New(waker.Config{})
	w.Close()
	s := &Semaphore{c: &Client{waker: w}, key: "jobs", permits: k}
	for i := 0; i < k; i++ {
		s.slots = append(s.slots, layout.PermitKey("jobs", i))
	}
	var ws []*waker.Waiting
	for i := 0; i < n; i++ {
		ws = append(ws, s.register(waker.Mark{Gen: w.Gen(), Live: true}))
	}
	return s, ws
}

// notice wakes the waiter the waker would wake for a release of slot.
func notice(s *Semaphore, slot int) {
	s.c.waker.WakeNext(s.slots[slot])
}

func signalled(wt *waker.Waiting) bool {
	select {
	case <-wt.C():
		return true
	default:
		return false
	}
}

// A waiter woken for two slots at once keeps one and hands the other at
// once to the next waiter of its client, which is signalled and takes it;
// each release wakes one waiter.
func TestSemaphoreWaiter_wokenForTwoSlotsHandsOneOn(t *testing.T) {
	s, ws := newSlotWaiters(3, 3)
	a, b, c := ws[0], ws[1], ws[2]
	notice(s, 0)
	notice(s, 1) // a waited longest for slot 1 too
	if !signalled(a) || signalled(b) || signalled(c) {
		t.Fatal("two releases signalled others than the longest-waiting waiter")
	}
	kept := s.wokenSlot(a)
	if kept != 0 && kept != 1 {
		t.Fatalf("the woken waiter took slot %d, want 0 or 1", kept)
	}
	if !signalled(b) || signalled(c) {
		t.Fatal("the other slot's notice was not handed on to the next waiter alone")
	}
	if got := s.wokenSlot(b); got != 1-kept {
		t.Fatalf("the next waiter took slot %d, want %d", got, 1-kept)
	}
	if got := s.wokenSlot(a); got != -1 {
		t.Fatalf("the first waiter took slot %d again", got)
	}
}

// A waiter alone on a slot hears a notice it hands on itself again, and
// takes it next.
func TestSemaphoreWaiter_aloneHearsItsHandedOnSlotAgain(t *testing.T) {
	s, ws := newSlotWaiters(2, 1)
	a := ws[0]
	notice(s, 0)
	notice(s, 1)
	first := s.wokenSlot(a)
	if !signalled(a) {
		t.Fatal("the handed-on notice did not signal the slot's only waiter")
	}
	if got := s.wokenSlot(a); got != 1-first {
		t.Fatalf("took slot %d next, want %d", got, 1-first)
	}
}

// A waiter that leaves with a permit of one slot hands on the notice of
// a slot it was woken for and did not try; not that of the slot it took.
func TestSemaphoreWaiter_leavingHandsOnUntriedNotices(t *testing.T) {
	s, ws := newSlotWaiters(3, 2)
	a, b := ws[0], ws[1]
	notice(s, 0)
	notice(s, 2)
	_ = signalled(a)
	a.Waiters()[0].Woken = false // taken by an attempt on slot 0, which won
	s.unregister(a, 0)
	if !signalled(b) {
		t.Fatal("the untried slot's notice was not handed on")
	}
	if got := s.wokenSlot(b); got != 2 {
		t.Fatalf("the next waiter took slot %d, want 2", got)
	}
	s.unregister(b, -1)
}
