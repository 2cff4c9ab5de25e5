package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// Any bytes are metadata: NUL, invalid UTF-8, the maximum length; Inspect
// and InspectHolder give them back exactly; "" stores no hash at all.
func TestMetadata_binaryAndEmpty(t *testing.T) {
	rs := startReal(t, 3)
	c := rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	long := make([]byte, layout.MaxMeta)
	for i := range long {
		long[i] = byte(i)
	}
	for _, v := range []string{"\x00", "a\x00b\xff\xfe\r\n", string(long)} {
		l, err := c.Acquire(ctx, "bin", redlock.WithFencing(), redlock.WithHolderFence(), redlock.WithMetadata(v))
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "metadata on every master", func() bool { return all(inspectMeta(t, c, "bin", l.Token()), v) })
		for i, st := range holderAll(t, c, "bin") {
			if len(st.Holders) != 1 || st.Holders[0].Meta != v || st.Holders[0].Fence != l.Fence() {
				t.Fatalf("InspectHolder of master %d = %+v", i, st)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l, err := c.Acquire(ctx, "empty", redlock.WithMetadata(""))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range rs.servers {
		if ex, _ := redis.Int(s.Do("EXISTS", layout.MetaKey("empty"))); ex != 0 {
			t.Fatalf("master %d has a metadata hash for empty metadata", i)
		}
	}
	_ = l.Release(ctx)
}

// Someone else's value of another type at the metadata key: the
// acquisition fails there with a clear error, and nothing of the lock is
// left on that master (the script's SET is not undone by its later error).
func TestMetadata_foreignTypeAtMetaKeyLeavesNothing(t *testing.T) {
	forEachN(t, func(t *testing.T, n int) {
		rs := startReal(t, n)
		c := rs.client(t, pipelinedPath)
		ctx := ctxT(t)
		if _, err := rs.servers[0].Do("SET", layout.MetaKey("k"), "not a hash"); err != nil {
			t.Fatal(err)
		}
		l, err := c.TryAcquire(ctx, "k", redlock.WithMetadata("me"))
		if n == 1 && err == nil {
			t.Fatal("acquired though the metadata could not be stored")
		}
		t.Logf("N=%d: %v", n, err)
		if l != nil {
			if err := l.Release(ctx); err != nil {
				t.Logf("release: %v", err)
			}
		}
		// The release returns at a quorum: at N=5 the last master's may
		// still be on its way. A key left by the attempt lives its TTL
		// (10 s by default), past the 3 s wait.
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		redistest.WaitFor(wctx, func() bool { return count(rs.values(t, "k"), "") == n })
		for i, v := range rs.values(t, "k") {
			if v != "" {
				t.Errorf("master %d keeps the lock key after the attempt: %q", i, v)
			}
		}
	})
}

// An attempt of every kind with metadata that is granted by one master and
// refused by the other two (which another client holds) is rolled back:
// the granting master keeps neither the lock nor its metadata (only a
// fencing counter).
func TestMetadata_goneAfterRollbackEveryKind(t *testing.T) {
	ctx := ctxT(t)
	opts := func(more ...redlock.LockOption) []redlock.LockOption {
		return append([]redlock.LockOption{redlock.WithTTL(10 * time.Second), redlock.WithMetadata("loser")}, more...)
	}
	type attempt func(c *redlock.Client, key string) error
	plainBlock := func(c *redlock.Client, key string) error { _, err := c.TryAcquire(ctx, key); return err }
	kinds := []struct {
		name         string
		block, other attempt
	}{
		{"plain", plainBlock, func(c *redlock.Client, key string) error { _, err := c.TryAcquire(ctx, key, opts()...); return err }},
		{"fenced fair", plainBlock, func(c *redlock.Client, key string) error {
			_, err := c.TryAcquire(ctx, key, opts(redlock.WithFencing(), redlock.WithFair())...)
			return err
		}},
		{"read", func(c *redlock.Client, key string) error { _, err := c.TryAcquireWrite(ctx, key); return err },
			func(c *redlock.Client, key string) error { _, err := c.TryAcquireRead(ctx, key, opts()...); return err }},
		{"write", func(c *redlock.Client, key string) error { _, err := c.TryAcquireRead(ctx, key); return err },
			func(c *redlock.Client, key string) error {
				_, err := c.TryAcquireWrite(ctx, key, opts()...)
				return err
			}},
		{"multi", func(c *redlock.Client, key string) error { _, err := c.TryAcquire(ctx, key+"-b"); return err },
			func(c *redlock.Client, key string) error {
				_, err := c.TryAcquireMulti(ctx, []string{key, key + "-b"}, opts()...)
				return err
			}},
		{"reentrant", func(c *redlock.Client, key string) error {
			r, err := c.NewReentrant(key, "blocker")
			if err != nil {
				return err
			}
			return r.TryAcquire(ctx)
		}, func(c *redlock.Client, key string) error {
			r, err := c.NewReentrant(key, "loser", opts()...)
			if err != nil {
				return err
			}
			return r.TryAcquire(ctx)
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			rs := startReal(t, 3)
			blocker, err := redigo.New(rs.pools[1:], redlock.WithTimeout(realTimeout))
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Close()
			if err := k.block(blocker, "k"); err != nil {
				t.Fatal(err)
			}
			if err := k.other(rs.client(t, pipelinedPath), "k"); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("err = %v", err)
			}
			leftover.None(t, rs.servers[:1]) // the first master keeps nothing
		})
	}
}
