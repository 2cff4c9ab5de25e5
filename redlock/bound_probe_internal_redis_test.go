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
			c, err := newRedigo(pools, withPipelining(pipelined), WithTimeout(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if l, err := c.TryAcquire(ctx, "probe:first"); err == nil { // first contact: the probe
				_ = l.Release(ctx)
			}
			if !redistest.Within(2*time.Second, func() bool { return c.bound.For(defaultTTLForTest, time.Now()) > c.timeout }) {
				t.Fatalf("bound %v after the probe's answers in 120 ms, want above the timeout %v", c.bound.For(defaultTTLForTest, time.Now()), c.timeout)
			}
		})
	}
}
