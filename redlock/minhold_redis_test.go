package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// A release before the minimum hold leaves the key on every master, with
// its time to live cut to what is left of the minimum: nobody takes the
// slot again before then, and the key is gone right after.
func TestMinHold_releaseBeforeItLeavesTheKeyUntilTheMinimum(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		other := rs.client(t, path)
		ctx := ctxT(t)
		const minHold = 1500 * time.Millisecond
		l, err := c.Acquire(ctx, "slot", redlock.WithTTL(30*time.Second), redlock.WithMinHold(minHold), redlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("early release: %v", err)
		}
		if !errors.Is(l.Err(), redlock.ErrReleased) {
			t.Errorf("Err after release = %v", l.Err())
		}
		// Every master still holds the token, expiring within the minimum.
		cut := redistest.WaitFor(ctx, func() bool {
			for _, s := range rs.servers {
				v, _ := redis.String(s.Do("GET", "slot"))
				pttl, _ := redis.Int(s.Do("PTTL", "slot"))
				if v != l.Token() || pttl <= 0 || pttl > int(minHold/time.Millisecond) {
					return false
				}
			}
			return true
		})
		if !cut {
			t.Fatalf("masters hold %v; want the token with a PTTL of at most %v", rs.values(t, "slot"), minHold)
		}
		if _, err := other.TryAcquire(ctx, "slot"); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire within the minimum hold: %v, want ErrNotAcquired", err)
		}
		var l2 *redlock.Lock
		freed := redistest.WaitFor(ctx, func() bool {
			l2, err = other.TryAcquire(ctx, "slot", redlock.WithFencing())
			return err == nil
		})
		if !freed {
			t.Fatalf("the key was not free after the minimum hold: %v", err)
		}
		if held := time.Since(l.Until()); held < minHold-200*time.Millisecond {
			t.Errorf("taken again %v after the release; want about %v", held, minHold)
		}
		if l2.Fence() <= l.Fence() {
			t.Errorf("fence %d after %d", l2.Fence(), l.Fence())
		}
		// Past the minimum, a release deletes as it always did.
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !redistest.WaitFor(ctx, func() bool { return count(rs.values(t, "slot"), "") == 3 }) {
			t.Errorf("after a release without a minimum, masters hold %v", rs.values(t, "slot"))
		}
	})
}

// A release after the minimum has passed deletes the key.
func TestMinHold_releaseAfterItDeletes(t *testing.T) {
	rs := startReal(t, 3)
	c := rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	begun := time.Now()
	l, err := c.Acquire(ctx, "slot", redlock.WithTTL(10*time.Second), redlock.WithMinHold(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(ctx, func() bool { return time.Since(begun) > 5*time.Millisecond })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !redistest.WaitFor(ctx, func() bool { return count(rs.values(t, "slot"), "") == 3 }) {
		t.Errorf("masters hold %v", rs.values(t, "slot"))
	}
}

func TestMinHold_badValuesAreRefused(t *testing.T) {
	rs := startReal(t, 1)
	c := rs.client(t, pipelinedPath)
	ctx := context.Background()
	if _, err := c.TryAcquire(ctx, "k", redlock.WithMinHold(-time.Second)); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("negative min hold: %v", err)
	}
	if _, err := c.TryAcquireRead(ctx, "k", redlock.WithMinHold(time.Second)); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("min hold on a read lock: %v", err)
	}
	if _, err := c.TryAcquire(ctx, "e", redlock.WithFencing(), redlock.WithHolderFence(), redlock.WithMinHold(time.Second)); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("min hold with a holder fence (an election's): %v", err)
	}
	if vals := rs.values(t, "k"); vals[0] != "" {
		t.Errorf("a refused option left %q", vals[0])
	}
}
