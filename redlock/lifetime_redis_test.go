package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

func forN1N5(t *testing.T, f func(t *testing.T, n int)) {
	for _, n := range []int{1, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) { f(t, n) })
	}
}

func TestWatchdog_keepsLockThroughFiveTTLs(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			c := rs.client(t, path, redlock.WithTimeout(100*time.Millisecond))
			other := rs.client(t, path, redlock.WithTimeout(100*time.Millisecond))
			ctx := context.Background()
			const ttl = 600 * time.Millisecond
			l, err := c.Acquire(ctx, "k", redlock.WithTTL(ttl), redlock.WithAutoExtend(0))
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * ttl)
			for time.Now().Before(deadline) {
				select {
				case <-l.Lost():
					t.Fatalf("lost: %v", l.Err())
				case <-time.After(ttl / 2):
				}
				if _, err := other.TryAcquire(ctx, "k", redlock.WithTTL(ttl)); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("another client got the kept-alive lock: %v", err)
				}
			}
			if time.Until(l.Until()) <= 0 {
				t.Error("validity ran out although the watchdog was extending")
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func TestLifetime_doCancelsFnWhenAMajorityDies(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			const timeout, ttl = 100 * time.Millisecond, time.Second
			period := ttl / 3
			c := rs.client(t, path, redlock.WithTimeout(timeout))
			var killedAt, cancelledAt time.Time
			// Bounded: a Do that cannot get the lock on a busy machine
			// fails the test here rather than wait for it without end.
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := c.Do(dctx, "job", func(ctx context.Context) error {
				killedAt = time.Now()
				for i := 0; i < n/2+1; i++ {
					if err := rs.servers[i].Kill(); err != nil {
						t.Error(err)
					}
				}
				<-ctx.Done()
				cancelledAt = time.Now()
				return context.Cause(ctx)
			}, redlock.WithTTL(ttl))
			if !errors.Is(err, redlock.ErrLockLost) {
				t.Fatalf("Do = %v, want ErrLockLost", err)
			}
			el := cancelledAt.Sub(killedAt)
			t.Logf("fn cancelled %v after a majority of %d masters died (extension period %v, TTL %v)", el, n, period, ttl)
			// The next extension (within a period) and two retries a quarter
			// period apart fail: cancelled well before the TTL.
			if el >= ttl {
				t.Errorf("fn was cancelled only after %v, not before the lock could expire", el)
			}
		})
	})
}
