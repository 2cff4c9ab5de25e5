package redlock

import (
	"sync/atomic"
	"testing"
)

// A release wakes a waiter at its first notice and again at the notice
// that completes a quorum, and never more, however many masters announce
// it; releases are told apart by id.
func TestKeyWaiters_announce(t *testing.T) {
	for _, tc := range []struct {
		quorum int
		want   []bool // per notice of one release
	}{
		{1, []bool{true}},
		{2, []bool{true, true, false}},
		{3, []bool{true, false, true, false, false}},
		{4, []bool{true, false, false, true, false, false, false}},
	} {
		var k keyWaiters
		for i, want := range tc.want {
			if got := k.announce("rel-1", tc.quorum); got != want {
				t.Errorf("quorum %d, notice %d: wake = %v, want %v", tc.quorum, i+1, got, want)
			}
		}
		if !k.announce("rel-2", tc.quorum) {
			t.Errorf("quorum %d: another release's first notice did not wake", tc.quorum)
		}
	}
}

// The key's arbiter's notice of a release wakes a waiter too, besides the
// first and the quorum-th: a waiter woken by an earlier notice whose
// arbitrated attempt found the arbiter not yet past the release retries
// then (arbiter.go).
func TestWaker_notify_arbitersNoticeWakes(t *testing.T) {
	c := &Client{masters: make([]master, 5), failing: make([]atomic.Bool, 5), quorum: 3}
	arb := c.arbiter("k")
	wt := &waiter{key: "k", ch: make(chan struct{}, 1)}
	w := &waker{c: c, waiters: map[string]*keyWaiters{"k": {queue: []*waiter{wt}}}}
	// Notices from every master, the arbiter's fourth (neither the first
	// nor the quorum-th).
	order := []int{(arb + 1) % 5, (arb + 2) % 5, (arb + 3) % 5, arb, (arb + 4) % 5}
	want := []bool{true, false, true, true, false}
	for n, from := range order {
		w.notify("k", "rel-1", from)
		woken := false
		select {
		case <-wt.ch:
			woken = true
		default:
		}
		if woken != want[n] {
			t.Errorf("notice %d (master %d, arbiter %d): woken = %v, want %v", n+1, from, arb, woken, want[n])
		}
	}
}
