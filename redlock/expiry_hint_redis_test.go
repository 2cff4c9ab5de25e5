package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// A holder that vanished frees its key at its TTL and announces nothing. A
// waiter whose backoff has grown past that TTL takes the key when it runs
// out (its refused attempt learned the holder's remaining TTL), not at its
// next backoff: with a 4 s backoff floor the next backoff attempt comes
// 2–8 s after the first, while the key is free 1 s after it.
func TestAcquire_waiterTakesAnExpiredLockWhenItsTTLRunsOut(t *testing.T) {
	const held = time.Second
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			servers := redistest.Start(t, n)
			addrs := make([]string, n)
			for i, s := range servers {
				addrs[i] = s.Addr()
			}
			forEachPath(t, func(t *testing.T, path connPath) {
				c := addrClient(t, path, addrs)
				key := "expiry-hint:" + path.name
				for _, s := range servers {
					if _, err := s.Do("SET", key, "vanished-holder", "PX", held.Milliseconds()); err != nil {
						t.Fatal(err)
					}
				}
				set := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				l, err := c.Acquire(ctx, key, redlock.WithBackoff(4*time.Second, time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				got := time.Since(set)
				t.Logf("took the lock %v after the key was set, %d attempts", got, l.Attempts())
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				// The key was free after held; the next backoff attempt
				// is at least 2 s after the first.
				if got >= held+held/2 {
					t.Fatalf("took the lock %v after the holder's key was set with a TTL of %v (%d attempts)", got, held, l.Attempts())
				}
			})
		})
	}
}
