package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// An extension of a lock 230 ms short of its Until, two of three masters
// stopped, the bound rising during it from the 100 ms timeout to the
// 300 ms cap of a 3 s TTL: it keeps its 100 ms wait and fails with
// ErrNotExtended, in time for the holder to try again, rather than wait
// on past Until to ErrLockLost. The 130 ms between the kept wait and
// Until leave room for a busy host's scheduling; the risen wait would
// overrun Until by 70 ms.
func TestAdaptiveBound_extensionNearUntilKeepsItsWait_pausedMaster(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(paths[pipelined], func(t *testing.T) {
			const (
				ttl     = 3 * time.Second
				timeout = 100 * time.Millisecond
				short   = 230 * time.Millisecond
			)
			servers := redistest.Start(t, 3)
			rp := newRisingPools(t, servers, "EVALSHA", each(0, 3), 2*time.Second)
			c := rp.client(t, pipelined, WithTimeout(timeout))
			rp.armed.Store(false)
			if ceiling := c.bound.Ceiling(ttl); ceiling <= short {
				t.Fatalf("the bound's ceiling %v: a risen wait would not overrun Until %v away", ceiling, short)
			}
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
			redistest.Eventually(t, 2*ttl, "the lock 230 ms short of its Until", func() bool {
				return time.Until(l.Until()) <= short
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
