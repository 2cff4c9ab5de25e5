package redlock

import "testing"

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
