package integration_test

// Suite 1: conformance. Every public operation of redlock, and the seeds'
// cases, on N = 1, 3, 5 and 7 real masters.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/redlock"
)

func TestConformance(t *testing.T) {
	cluster.ForEachBackend(t, func(t *testing.T, b cluster.Backend) {
		for _, n := range []int{1, 3, 5, 7} {
			t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
				c := cluster.Start(t, n, cluster.WithBackend(b))
				forEachPath(t, func(t *testing.T, path connPath) {
					t.Run("lifecycle", func(t *testing.T) { conformLifecycle(t, path, c) })
					t.Run("second acquirer is refused", func(t *testing.T) { conformExclusion(t, path, c) })
					t.Run("foreign token cannot release or extend", func(t *testing.T) { conformForeign(t, path, c) })
					t.Run("vanished holder frees the key at its TTL", func(t *testing.T) { conformVanished(t, path, c) })
					t.Run("failed acquire leaves no key", func(t *testing.T) { conformNoLeftovers(t, path, c) })
				})
			})
		}
	})
}

func conformLifecycle(t *testing.T, path connPath, c *cluster.Cluster) {
	n := len(c.Masters)
	client := newClient(t, path, c)
	ctx := ctxT(t, 30*time.Second)
	k := key(t)
	l, err := client.Acquire(ctx, k, redlock.WithTTL(3*time.Second))
	must(t, err)
	if v := time.Until(l.Until()); v <= 0 || v > 3*time.Second {
		t.Errorf("validity %v from a 3s TTL", v)
	}
	must(t, l.Extend(ctx, 20*time.Second))
	if v := time.Until(l.Until()); v < 19*time.Second {
		t.Errorf("validity %v after extending to 20s", v)
	}
	waitHolders(t, c, k, l.Token(), n)
	for i, m := range c.Masters {
		if pttl, err := m.Do("PTTL", k); err != nil || pttl.(int64) < 15000 {
			t.Errorf("master %d: PTTL %v, %v after extending to 20s", i, pttl, err)
		}
	}
	must(t, l.Release(ctx))
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("second Release: %v, want ErrNotHeld", err)
	}
	client.Close() // every master has answered the release
	if got := count(holders(c, k), ""); got != n {
		t.Errorf("after release %d of %d masters are free: %q", got, n, holders(c, k))
	}
}

func conformExclusion(t *testing.T, path connPath, c *cluster.Cluster) {
	a, b := newClient(t, path, c), newClient(t, path, c)
	ctx := ctxT(t, 30*time.Second)
	k := key(t)
	l, err := a.Acquire(ctx, k)
	must(t, err)
	_, err = b.TryAcquire(ctx, k)
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.As(err, &qe) {
		t.Fatalf("second acquirer: %v", err)
	}
	if qe.Succeeded >= qe.Quorum || qe.Failed != nil {
		t.Errorf("second acquirer: %+v", qe)
	}
	_, err = b.Acquire(ctx, k, redlock.WithWait(200*time.Millisecond))
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("second acquirer with a wait: %v", err)
	}
	must(t, l.Release(ctx))
	l2, err := b.Acquire(ctx, k, redlock.WithWait(5*time.Second))
	must(t, err)
	must(t, l2.Release(ctx))
}

func conformForeign(t *testing.T, path connPath, c *cluster.Cluster) {
	n := len(c.Masters)
	client := newClient(t, path, c)
	ctx := ctxT(t, 30*time.Second)
	k := key(t)
	l, err := client.Acquire(ctx, k, redlock.WithTTL(10*time.Second))
	must(t, err)
	waitHolders(t, c, k, l.Token(), n)
	for _, m := range c.Masters {
		_, err := m.Do("SET", k, "foreign", "PX", 60000)
		must(t, err)
	}
	if err := l.Extend(ctx, 10*time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("Extend over a foreign token: %v, want ErrLockLost", err)
	}
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("Release over a foreign token: %v, want ErrNotHeld", err)
	}
	client.Close()
	if got := count(holders(c, k), "foreign"); got != n {
		t.Errorf("the foreign holder's key survives on %d of %d masters", got, n)
	}
}

func conformVanished(t *testing.T, path connPath, c *cluster.Cluster) {
	a, b := newClient(t, path, c), newClient(t, path, c)
	ctx := ctxT(t, 30*time.Second)
	k := key(t)
	_, err := a.Acquire(ctx, k, redlock.WithTTL(time.Second))
	must(t, err)
	a.Close() // the holder vanishes without releasing
	start := time.Now()
	l, err := b.Acquire(ctx, k, redlock.WithTTL(time.Second), redlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("a vanished holder's lock never freed: %v", err)
	}
	if el := time.Since(start); el < 500*time.Millisecond {
		t.Errorf("acquired after %v, before the vanished holder's TTL ran out", el)
	}
	must(t, l.Release(ctx))
}

func conformNoLeftovers(t *testing.T, path connPath, c *cluster.Cluster) {
	n := len(c.Masters)
	q := n/2 + 1
	k := key(t)
	// Another holder owns the key on a bare quorum; our attempts are
	// granted on the rest and must be undone there.
	for i := 0; i < q; i++ {
		_, err := c.Masters[i].Do("SET", k, "other", "PX", 60000)
		must(t, err)
	}
	client := newClient(t, path, c)
	for i := 0; i < 10; i++ {
		if _, err := client.TryAcquire(context.Background(), k); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	// Also attempts cut short by the caller's deadline.
	for i := 0; i < 10; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i*50)*time.Microsecond)
		_, err := client.TryAcquire(ctx, k)
		cancel()
		if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("cut-short attempt %d: %v", i, err)
		}
	}
	client.Close()
	vals := holders(c, k)
	if count(vals, "other") != q || count(vals, "") != n-q {
		t.Errorf("after failed attempts the masters hold %q", vals)
	}
}

// waitHolders waits until want masters hold token at key: the masters not
// needed for a quorum answer a moment after the call returns.
func waitHolders(t *testing.T, c *cluster.Cluster, key, token string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for count(holders(c, key), token) < want {
		if time.Now().After(deadline) {
			t.Fatalf("masters hold %q, want %q on %d", holders(c, key), token, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
