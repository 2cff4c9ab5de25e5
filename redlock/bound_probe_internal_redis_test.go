package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// A Client's first contact asks every master INFO server (the identity
// probe): its answers, late ones too, are the first round trips the
// adaptive bound sees. Masters that answer it in 120 ms, past the 50 ms
// timeout, while they answer the rounds at once, raise the bound: a
// fresh Client on a slow host does not begin every attempt at the
// timeout until its rounds have been answered late. (On the pipelined
// transport the first round's commands wait behind the probe on the one
// connection, and teach the bound too; on the pooled one only the probe
// does.)
func TestAdaptiveBound_learnsFromTheFirstContactProbe(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "pooled"}[pipelined], func(t *testing.T) {
			pools := holdingPools(t, redistest.Start(t, 3), func(_ int, name string) bool { return strings.EqualFold(name, "INFO") }, 120*time.Millisecond)
			// The probe teaches the bound only where it was answered: on a
			// loaded host a master's first dial can fail the probe with an
			// error. So the test takes a fresh Client until a quorum of
			// masters has answered its probe (each answer is noted before
			// it identifies its master, all within one probe, so no peak
			// has decayed yet), then reads the bound.
			answered := func(c *Client) bool {
				n := 0
				for _, id := range c.ident.IDs() {
					if id != "" {
						n++
					}
				}
				return n >= c.quorum
			}
			ctx := context.Background()
			for try := 0; try < 10; try++ {
				c, err := newRedigo(pools, withPipelining(pipelined), WithTimeout(50*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				if l, err := c.TryAcquire(ctx, "probe:first"); err == nil { // first contact: the probe
					_ = l.Release(ctx)
				}
				if redistest.Within(2*time.Second, func() bool { return answered(c) }) {
					b := c.bound.For(defaultTTLForTest, time.Now())
					c.Close()
					if b <= c.timeout {
						t.Fatalf("bound %v after the probe's answers in 120 ms, want above the timeout %v", b, c.timeout)
					}
					return
				}
				c.Close()
			}
			t.Skip("no quorum of masters answered the identity probe of 10 Clients")
		})
	}
}
