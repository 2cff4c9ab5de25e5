package redlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// An owner ID belongs to one Reentrant at a time: a second Reentrant of
// the same owner (in the same Client or another) is refused while the
// first holds the lock, and leaves the first's count alone; once the
// first released, the second takes the lock, and neither the first's
// stale Lock nor the first Reentrant can then end or take over the
// second's hold, nor can another owner take the key.
func TestReentrant_ownersSecondReentrantWaitsForTheFirst(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c1, c2 := rs.client(t, path), rs.client(t, path)
		ctx := ctxT(t)
		newRe := func(c *redlock.Client, owner string) *redlock.Reentrant {
			t.Helper()
			r, err := c.NewReentrant("k", owner, redlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		// allHold waits until every master holds owner's count want.
		allHold := func(what, want string) {
			t.Helper()
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			ok := redistest.WaitFor(wctx, func() bool {
				return !slices.ContainsFunc(rs.hget(t, "k", "owner"), func(v string) bool { return v != want })
			})
			if !ok {
				t.Fatalf("%s: the masters hold counts %q, want %q on each", what, rs.hget(t, "k", "owner"), want)
			}
		}
		first, sameClient, otherClient := newRe(c1, "owner"), newRe(c1, "owner"), newRe(c2, "owner")
		for range 2 {
			if err := first.Acquire(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for name, r := range map[string]*redlock.Reentrant{"same Client": sameClient, "another Client": otherClient} {
			if err := r.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("a second Reentrant of the owner (%s) while the first holds: %v, want ErrNotAcquired", name, err)
			}
		}
		allHold("after the second Reentrants were refused", "2")
		stale := first.Lock()
		for range 2 {
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// The last release returns at a quorum: wait for the rest.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if !redistest.WaitFor(wctx, func() bool { return rs.exists(t, "k") == 0 }) {
			t.Fatalf("the first Reentrant's hold is left on %d masters after its last release", rs.exists(t, "k"))
		}
		if err := otherClient.TryAcquire(ctx); err != nil {
			t.Fatalf("the second Reentrant after the first released: %v", err)
		}
		t.Cleanup(func() { _ = otherClient.Release(context.Background()) })
		allHold("the second Reentrant's hold", "1")
		if err := stale.Release(ctx); err == nil {
			t.Errorf("the first Reentrant's released Lock released again")
		}
		if err := first.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Errorf("the first Reentrant while the second holds: %v, want ErrNotAcquired", err)
		}
		if err := newRe(c1, "another").TryAcquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Errorf("another owner while the second Reentrant holds: %v, want ErrNotAcquired", err)
		}
		allHold("after the first's stale Lock and its attempt", "1")
		if l := otherClient.Lock(); l == nil || l.Err() != nil {
			t.Errorf("the second Reentrant's lock: %v", l)
		}
	})
}
