package redlock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// A woken waiter's attempt asks its lead master first and sends to the
// others only once the lead granted: the others' answers come after the
// lead's. Their round trips are theirs, from when they were sent, not
// from the round's start: else a single slow master, as the lead, would
// make every master look as slow as itself and raise the bound for all
// (a minority of slow masters must leave it at the timeout).
//
// The lead takes 300 ms of a 500 ms timeout: counted from the round's
// start, the others' answers would take at least that, and the bound
// (twice a quorum's round trip) would be 600 ms or more. Counted from
// their own sends, the bound stays the timeout unless the host itself
// stalls for over 250 ms, far beyond what a busy machine does to a
// round trip on the loopback.
func TestAdaptiveBound_aSlowLeadDoesNotMakeTheOthersLookSlow(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "pooled"}[pipelined], func(t *testing.T) {
			const (
				delay   = 300 * time.Millisecond
				timeout = 500 * time.Millisecond
				ttl     = 10 * time.Second // its tenth, the bound's ceiling, above the timeout
			)
			reals := redistest.Start(t, 3)
			c := slowMastersClient(t, reals, func(i int) bool { return i == 0 }, pipelined, delay, WithTimeout(timeout))
			if ceiling := c.bound.Ceiling(ttl); ceiling <= 2*delay {
				t.Fatalf("the bound's ceiling %v leaves no room to see a rise to %v", ceiling, 2*delay)
			}
			ctx := context.Background()
			granted := 0
			for i := range 4 {
				l, err := ledAttempt(t, c, "slow-lead:"+strconv.Itoa(i), ttl, 0)
				if err != nil {
					t.Logf("attempt %d led by the slow master: %v", i, err)
					continue
				}
				granted++
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if granted == 0 {
				t.Fatalf("no attempt led by a master answering in %v was granted within the %v timeout", delay, timeout)
			}
			if got := c.bound.For(ttl, time.Now()); got != timeout {
				t.Errorf("bound %v after %d attempts led by the one slow master of three, want the timeout %v", got, granted, timeout)
			}
		})
	}
}
