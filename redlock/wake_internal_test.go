package redlock

import "testing"

// A release wakes a waiter at its first notice and, when no master leads
// (lead -1), again at the notice that completes a quorum, and never more,
// however many masters announce it; releases are told apart by id.
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
			if got := k.announce("rel-1", i, -1, -1, tc.quorum); got != want {
				t.Errorf("quorum %d, notice %d: wake = %v, want %v", tc.quorum, i+1, got, want)
			}
		}
		if !k.announce("rel-2", 0, -1, -1, tc.quorum) {
			t.Errorf("quorum %d: another release's first notice did not wake", tc.quorum)
		}
	}
}

// With a lead master, a release wakes a waiter at its first notice, at
// the lead's, when that was not the first (the woken waiter's attempt may
// have reached the lead before the release did), and at the notice that
// completes a quorum (a lead that announced first grants the woken
// waiter's attempt, and the others it asks next may not have run the
// release yet).
func TestKeyWaiters_announceWithALead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order []int // the masters announcing, in order; the lead is 2, the quorum 3
		want  []bool
	}{
		{"lead first", []int{2, 0, 1, 3, 4}, []bool{true, false, true, false, false}},
		{"lead second", []int{0, 2, 1, 3, 4}, []bool{true, true, true, false, false}},
		{"lead after the quorum", []int{0, 1, 3, 2, 4}, []bool{true, false, true, true, false}},
		{"lead last", []int{0, 1, 3, 4, 2}, []bool{true, false, true, false, true}},
		{"lead silent", []int{0, 1, 3, 4}, []bool{true, false, true, false}},
	} {
		var k keyWaiters
		for i, from := range tc.order {
			if got := k.announce("rel", from, 2, -1, 3); got != tc.want[i] {
				t.Errorf("%s, notice %d (master %d): wake = %v, want %v", tc.name, i+1, from, got, tc.want[i])
			}
		}
	}
}

// The master a woken attempt asked first wakes a waiter with its notice
// even when, by then, another master leads the key (the one asked failed
// a command since, and leadFor passes it over for leadQuiet): it refused
// the attempt, not having run the release yet, and its notice may be
// neither the first, nor the lead's, nor the quorum's.
func TestKeyWaiters_announceFromTheMasterAsked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order []int // the masters announcing, in order; the lead is 2, the master asked 4, the quorum 3
		want  []bool
	}{
		{"asked last", []int{0, 1, 3, 2, 4}, []bool{true, false, true, true, true}},
		{"asked after the quorum", []int{0, 1, 3, 4, 2}, []bool{true, false, true, true, true}},
		{"asked before the quorum", []int{0, 4, 1, 3}, []bool{true, true, true, false}},
	} {
		var k keyWaiters
		for i, from := range tc.order {
			if got := k.announce("rel", from, 2, 4, 3); got != tc.want[i] {
				t.Errorf("%s, notice %d (master %d): wake = %v, want %v", tc.name, i+1, from, got, tc.want[i])
			}
		}
	}
}

// A waiting writer is woken before the client's readers of the key,
// wherever it stands in the queue (they cannot win past its intent), and
// goes to the back; without one, the longest-waiting waiter is woken.
func TestKeyWaiters_wakeFirstPrefersAWaitingWriter(t *testing.T) {
	mk := func(ahead bool) *waiter {
		return &waiter{key: "k", ch: make(chan struct{}, 1), ahead: ahead}
	}
	r1, r2, w := mk(false), mk(false), mk(true)
	kw := &keyWaiters{queue: []*waiter{r1, r2, w}}
	if got := kw.wakeFirst(); got != w {
		t.Fatal("a reader was woken before the waiting writer")
	}
	if kw.queue[0] != r1 || kw.queue[1] != r2 || kw.queue[2] != w {
		t.Fatal("the writer is not at the back after its wake")
	}
	if len(w.ch) != 1 || len(r1.ch) != 0 {
		t.Fatal("the writer was not told")
	}
	kw = &keyWaiters{queue: []*waiter{r1, r2}}
	if got := kw.wakeFirst(); got != r1 || kw.queue[0] != r2 || kw.queue[1] != r1 {
		t.Fatal("without a writer, the longest-waiting waiter is not the one woken")
	}
}
