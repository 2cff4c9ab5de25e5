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
func TestAdaptiveBound_aSlowLeadDoesNotMakeTheOthersLookSlow(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "pooled"}[pipelined], func(t *testing.T) {
			const delay = 35 * time.Millisecond
			reals := redistest.Start(t, 3)
			timeout := 50 * time.Millisecond
			c := slowMastersClient(t, reals, func(i int) bool { return i == 0 }, pipelined, delay, WithTimeout(timeout))
			ctx := context.Background()
			granted := 0
			for i := range 5 {
				l, err := ledAttempt(t, c, "slow-lead:"+strconv.Itoa(i), defaultTTLForTest, 0)
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
				t.Skip("no attempt led by a master answering in 35 ms was granted within the 50 ms timeout: the host is too loaded to tell")
			}
			if got := c.bound.For(defaultTTLForTest, time.Now()); got != timeout {
				t.Errorf("bound %v after %d attempts led by the one slow master of three, want the timeout %v", got, granted, timeout)
			}
		})
	}
}
