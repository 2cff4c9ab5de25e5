package integration_test

// Quorum members that are Redis Clusters through the redigo transport
// (redlock.NewFromAddrs with cluster://SEED+SEED members; issue 17).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/redlock"
)

// redigoClusterMembers starts k members of s primaries each (processes)
// and returns them with their cluster:// specs.
func redigoClusterMembers(t *testing.T, k, s int) ([]*cluster.RedisCluster, []string) {
	t.Helper()
	members := cluster.StartRedisClusters(t, k, s, cluster.WithBackend(cluster.Process))
	specs := make([]string, k)
	for i, m := range members {
		specs[i] = "cluster://" + strings.Join(m.Seeds(), "+")
	}
	return members, specs
}

// slotKeys returns, for each of s primaries that split the slots evenly,
// a key with a hash tag whose slot that primary owns.
func slotKeys(prefix string, s int) []string {
	out := make([]string, s)
	found := 0
	for i := 0; found < s; i++ {
		k := fmt.Sprintf("{%s%d}:lock", prefix, i)
		shard := cluster.Slot(k) * s / cluster.Slots
		if out[shard] == "" {
			out[shard] = k
			found++
		}
	}
	return out
}

func newRedigoClusterClient(t *testing.T, specs []string, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redlock.NewFromAddrs(specs, append([]redlock.Option{redlock.WithTimeout(500 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// holdersOn returns the value of key on its owner in each member.
func holdersOn(t *testing.T, members []*cluster.RedisCluster, key string) []string {
	t.Helper()
	out := make([]string, len(members))
	for i, m := range members {
		n, err := m.Owner(cluster.Slot(key))
		if err != nil {
			t.Fatal(err)
		}
		v, err := redis.String(n.Do("GET", key))
		if err != nil && !errors.Is(err, redis.ErrNil) {
			if strings.HasPrefix(err.Error(), "MOVED") || strings.HasPrefix(err.Error(), "ASK") {
				continue
			}
			t.Fatal(err)
		}
		out[i] = v
	}
	return out
}

// Every lock kind over 3 members of 3 primaries, a key on each primary.
func TestRedigoCluster_everyLockKind(t *testing.T) {
	members, specs := redigoClusterMembers(t, 3, 3)
	c := newRedigoClusterClient(t, specs, redlock.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	for _, key := range slotKeys(t.Name(), 3) {
		t.Run(fmt.Sprintf("slot %d", cluster.Slot(key)), func(t *testing.T) {
			t.Run("plain", func(t *testing.T) {
				l, err := c.Acquire(ctx, key, redlock.WithTTL(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				waitHeldOnAll(t, members, key, l.Token())
				if _, err := c.TryAcquire(ctx, key); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("second TryAcquire = %v, want ErrNotAcquired", err)
				}
				if err := l.Extend(ctx, 5*time.Second); err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				l2, err := c.TryAcquire(ctx, key)
				if err != nil {
					t.Fatalf("after release: %v", err)
				}
				_ = l2.Release(ctx)
			})
			t.Run("fenced", func(t *testing.T) {
				var last uint64
				for i := 0; i < 3; i++ {
					l, err := c.Acquire(ctx, key, redlock.WithFencing())
					if err != nil {
						t.Fatal(err)
					}
					if l.Fence() <= last {
						t.Fatalf("fence %d after %d: tokens went backwards", l.Fence(), last)
					}
					last = l.Fence()
					if err := l.Release(ctx); err != nil {
						t.Fatal(err)
					}
				}
			})
			t.Run("fair", func(t *testing.T) {
				l, err := c.Acquire(ctx, key, redlock.WithFair())
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan error, 1)
				go func() {
					l2, err := c.Acquire(ctx, key, redlock.WithFair(), redlock.WithWait(10*time.Second))
					if err == nil {
						err = l2.Release(ctx)
					}
					got <- err
				}()
				time.Sleep(100 * time.Millisecond)
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatalf("fair waiter: %v", err)
				}
			})
			t.Run("read write", func(t *testing.T) {
				r1, err := c.AcquireRead(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				r2, err := c.AcquireRead(ctx, key)
				if err != nil {
					t.Fatalf("second reader: %v", err)
				}
				if _, err := c.AcquireWrite(ctx, key, redlock.WithWait(0)); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("writer beside readers = %v, want ErrNotAcquired", err)
				}
				for _, r := range []*redlock.Lock{r1, r2} {
					if err := r.Release(ctx); err != nil {
						t.Fatal(err)
					}
				}
				w, err := c.AcquireWrite(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.AcquireRead(ctx, key, redlock.WithWait(0)); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("reader beside a writer = %v, want ErrNotAcquired", err)
				}
				if err := w.Release(ctx); err != nil {
					t.Fatal(err)
				}
			})
			t.Run("multi in one slot", func(t *testing.T) {
				ks := []string{key + ":a", key + ":b"}
				l, err := c.AcquireMulti(ctx, ks)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.TryAcquire(ctx, ks[1]); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("a held key of a multi-key lock was acquired: %v", err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			})
			t.Run("reentrant", func(t *testing.T) {
				r, err := c.NewReentrant(key, "owner-1")
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 2; i++ {
					if err := r.Acquire(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := c.TryAcquire(ctx, key); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("a held reentrant key was acquired: %v", err)
				}
				for i := 0; i < 2; i++ {
					if err := r.Release(ctx); err != nil {
						t.Fatal(err)
					}
				}
			})
			t.Run("inspect", func(t *testing.T) {
				l, err := c.Acquire(ctx, key, redlock.WithTTL(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(ctx)
				waitHeldOnAll(t, members, key, l.Token()) // the third member may answer after the quorum
				st, err := c.Inspect(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range st.Masters {
					if m.Err != nil || len(m.State.Holders) != 1 || m.State.Holders[0].Token != l.Token() {
						t.Errorf("inspect %s: %+v (err %v), want the lock's token", m.Addr, m.State, m.Err)
					}
				}

			})
		})
	}

	t.Run("multi across slots is refused", func(t *testing.T) {
		ks := slotKeys("cross", 2)
		if _, err := c.AcquireMulti(ctx, ks); !errors.Is(err, redlock.ErrInvalid) {
			t.Fatalf("AcquireMulti across slots = %v, want ErrInvalid", err)
		}
	})
}

func countOf(vals []string, want string) int {
	n := 0
	for _, v := range vals {
		if v == want {
			n++
		}
	}
	return n
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// waitHeldOnAll waits (generously) until every member holds key with
// token: an acquisition returns at the quorum, and the last member's reply
// may come after.
func waitHeldOnAll(t *testing.T, members []*cluster.RedisCluster, key, token string) {
	t.Helper()
	var got []string
	for i := 0; i < 200; i++ {
		if got = holdersOn(t, members, key); countOf(got, token) == len(members) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("holders %q, want %s on all %d members", got, token, len(members))
}
