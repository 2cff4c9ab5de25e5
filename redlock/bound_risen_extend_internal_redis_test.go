package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// An extension of a lock 70 ms short of its Until, two of three masters
// stopped, the bound rising during it from the 50 ms timeout to the
// 100 ms cap of a 1 s TTL: it keeps its 50 ms wait and fails with
// ErrNotExtended, in time for the holder to try again, rather than wait
// on past Until to ErrLockLost.
func TestAdaptiveBound_extensionNearUntilKeepsItsWait_pausedMaster(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(paths[pipelined], func(t *testing.T) {
			servers := redistest.Start(t, 3)
			rp := newRisingPools(t, servers, "EVALSHA", each(0, 3), 2*time.Second)
			c := rp.client(t, pipelined)
			rp.armed.Store(false)
			const ttl = time.Second
			ctx := context.Background()
			l, err := c.TryAcquire(ctx, "risen:extend", WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			if b := c.bound.For(ttl, time.Now()); b != c.timeout {
				t.Fatalf("bound %v before the extension, want the timeout", b)
			}
			for _, s := range servers[1:] {
				paused(t, s)
			}
			redistest.Eventually(t, 2*time.Second, "the lock 70 ms short of its Until", func() bool {
				return time.Until(l.Until()) <= 70*time.Millisecond
			})
			rp.armed.Store(true)
			start := time.Now()
			left := l.Until().Sub(start)
			err = l.Extend(ctx, ttl)
			took := time.Since(start)
			if !errors.Is(err, ErrNotExtended) {
				t.Errorf("Extend %v short of Until, two masters stopped, bound risen to %v: %v after %v, want ErrNotExtended before Until",
					left, c.bound.For(ttl, time.Now()), err, took)
			}
		})
	}
}
