package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// SlotKeys returns, for each of s primaries that split a cluster's slots
// evenly (as cluster.StartRedisClusters does), a key with a hash tag whose
// slot that primary owns, so that a case run on each key reaches every
// primary.
func SlotKeys(prefix string, s int) []string {
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

// ClusterKinds runs every lock kind on c, whose members are the Redis
// Clusters members, of s primaries each: plain (with Extend), fenced
// (tokens never backwards), an election (Leader's one-step read routed to
// the key's node), fair, read-write, multi-key in one slot, reentrant and
// Inspect, on a key owned by each primary; then a multi-key lock across
// slots, which must be refused with ErrInvalid. Each case ends when its
// key is gone from every member: a release returns at its quorum, and the
// last member's may land after it, where the next case's lock of another
// kind would meet it.
func ClusterKinds(t *testing.T, c *redlock.Client, members []*cluster.RedisCluster, s int) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waitHeld := func(t *testing.T, key, token string) { HeldOn(members)(t, key, token) }
	for _, key := range SlotKeys(t.Name(), s) {
		t.Run(fmt.Sprintf("slot %d", cluster.Slot(key)), func(t *testing.T) {
			free := func(t *testing.T) { FreeOn(t, members, key) }
			t.Run("plain", func(t *testing.T) {
				l, err := c.Acquire(ctx, key, redlock.WithTTL(5*time.Second))
				must(t, err)
				waitHeld(t, key, l.Token())
				if _, err := c.TryAcquire(ctx, key); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("second TryAcquire = %v, want ErrNotAcquired", err)
				}
				extend(t, l, 5*time.Second)
				must(t, l.Release(ctx))
				l2, err := c.TryAcquire(ctx, key)
				if err != nil {
					t.Fatalf("after release: %v", err)
				}
				must(t, l2.Release(ctx))
				free(t)
			})
			t.Run("fenced", func(t *testing.T) {
				var last uint64
				for i := 0; i < 3; i++ {
					l, err := c.Acquire(ctx, key, redlock.WithFencing())
					must(t, err)
					if l.Fence() <= last {
						t.Fatalf("fence %d after %d: tokens went backwards", l.Fence(), last)
					}
					last = l.Fence()
					must(t, l.Release(ctx))
				}
				free(t)
			})
			t.Run("election", func(t *testing.T) {
				e, err := election.New(c, key)
				must(t, err)
				ld, err := e.Campaign(ctx, "node-a")
				must(t, err)
				got, err := e.Leader(ctx)
				if err != nil || got.Value != "node-a" || got.Term != ld.Term() || got.Term == 0 {
					t.Fatalf("Leader = %+v, %v; want node-a at term %d", got, err, ld.Term())
				}
				must(t, ld.Resign(ctx))
				free(t)
			})
			t.Run("fair", func(t *testing.T) {
				l, err := c.Acquire(ctx, key, redlock.WithFair())
				must(t, err)
				got := make(chan error, 1)
				go func() {
					l2, err := c.Acquire(ctx, key, redlock.WithFair(), redlock.WithWait(10*time.Second))
					if err == nil {
						err = l2.Release(ctx)
					}
					got <- err
				}()
				time.Sleep(100 * time.Millisecond) // the waiter queues (or not yet: either way it must get the lock)
				must(t, l.Release(ctx))
				if err := <-got; err != nil {
					t.Fatalf("fair waiter: %v", err)
				}
				free(t)
			})
			t.Run("read write", func(t *testing.T) {
				r1, err := c.AcquireRead(ctx, key)
				must(t, err)
				r2, err := c.AcquireRead(ctx, key)
				if err != nil {
					t.Fatalf("second reader: %v", err)
				}
				if _, err := c.AcquireWrite(ctx, key, redlock.WithWait(0)); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("writer beside readers = %v, want ErrNotAcquired", err)
				}
				for _, r := range []*redlock.Lock{r1, r2} {
					must(t, r.Release(ctx))
				}
				w, err := c.AcquireWrite(ctx, key)
				must(t, err)
				if _, err := c.AcquireRead(ctx, key, redlock.WithWait(0)); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("reader beside a writer = %v, want ErrNotAcquired", err)
				}
				must(t, w.Release(ctx))
				free(t)
			})
			t.Run("multi in one slot", func(t *testing.T) {
				ks := []string{key + ":a", key + ":b"}
				l, err := c.AcquireMulti(ctx, ks)
				must(t, err)
				if _, err := c.TryAcquire(ctx, ks[1]); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("a held key of a multi-key lock was acquired: %v", err)
				}
				must(t, l.Release(ctx))
				for _, k := range ks {
					FreeOn(t, members, k)
				}
			})
			t.Run("reentrant", func(t *testing.T) {
				r, err := c.NewReentrant(key, "owner-1")
				must(t, err)
				for i := 0; i < 2; i++ {
					must(t, r.Acquire(ctx))
				}
				if r.Count() != 2 {
					t.Fatalf("count %d, want 2", r.Count())
				}
				if _, err := c.TryAcquire(ctx, key); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("a held reentrant key was acquired: %v", err)
				}
				for i := 0; i < 2; i++ {
					must(t, r.Release(ctx))
				}
				free(t)
			})
			t.Run("inspect", func(t *testing.T) {
				l, err := c.Acquire(ctx, key, redlock.WithTTL(5*time.Second))
				must(t, err)
				defer func() { must(t, l.Release(ctx)); free(t) }()
				waitHeld(t, key, l.Token())
				st, err := c.Inspect(ctx, key)
				must(t, err)
				for _, m := range st.Masters {
					if m.Err != nil || len(m.State.Holders) != 1 || m.State.Holders[0].Token != l.Token() {
						t.Errorf("inspect %s: %+v (err %v), want the lock's token", m.Addr, m.State, m.Err)
					}
				}
			})
		})
	}
	t.Run("multi across slots is refused", func(t *testing.T) {
		if _, err := c.AcquireMulti(ctx, SlotKeys("cross", 2)); !errors.Is(err, redlock.ErrInvalid) {
			t.Fatalf("AcquireMulti across slots = %v, want ErrInvalid", err)
		}
	})
}

// ClusterHolders returns the value of key on the node owning its slot in
// each member ("" where it is not set, holds another kind of value, or
// where the slot is moving and the node redirects).
func ClusterHolders(t *testing.T, members []*cluster.RedisCluster, key string) []string {
	t.Helper()
	out := make([]string, len(members))
	for i, m := range members {
		n, err := m.Owner(cluster.Slot(key))
		if err != nil {
			t.Fatal(err)
		}
		v, err := redis.String(n.Do("GET", key))
		if err != nil && !errors.Is(err, redis.ErrNil) {
			// A moving slot redirects; a key of another kind (a reentrant
			// lock's hash whose release has not reached this member yet)
			// holds no plain lock.
			if msg := err.Error(); strings.HasPrefix(msg, "MOVED") || strings.HasPrefix(msg, "ASK") || strings.HasPrefix(msg, "WRONGTYPE") {
				continue
			}
			t.Fatal(err)
		}
		out[i] = v
	}
	return out
}

// HeldOn returns a function that waits (generously) until every one of
// members holds the key with the token: an acquisition returns at its
// quorum, and the last member's grant may land after it.
func HeldOn(members []*cluster.RedisCluster) func(t *testing.T, key, token string) {
	return func(t *testing.T, key, token string) {
		t.Helper()
		var got []string
		for i := 0; i < 200; i++ {
			if got = ClusterHolders(t, members, key); Count(got, token) == len(members) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("holders %q, want %s on all %d members", got, token, len(members))
	}
}

// FreeOn waits (generously) until key exists on no member's node owning
// its slot.
func FreeOn(t *testing.T, members []*cluster.RedisCluster, key string) {
	t.Helper()
	for i := 0; ; i++ {
		held := 0
		for _, m := range members {
			n, err := m.Owner(cluster.Slot(key))
			if err != nil {
				t.Fatal(err)
			}
			if v, err := n.Do("EXISTS", key); err != nil {
				t.Fatal(err)
			} else if v != int64(0) {
				held++
			}
		}
		if held == 0 {
			return
		}
		if i == 300 {
			t.Fatalf("%s still on %d members after 3s", key, held)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ClusterReleaseNotice checks that a waiter on c, whose members are the
// Redis Clusters members of s primaries each, is woken by the holder's
// release notice, on a key owned by each primary: a script's PUBLISH
// reaches every node of a cluster (the bus broadcasts it), and the
// transport's subscription is on one of them. The waiter's backoff is an
// hour, far past the case's deadline, so polling cannot be what gives it
// the lock; it waits until the waiter is subscribed on every member (it
// subscribes after its first attempt failed) before the release.
func ClusterReleaseNotice(t *testing.T, c *redlock.Client, members []*cluster.RedisCluster, s int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, key := range SlotKeys(t.Name(), s) {
		l, err := c.Acquire(ctx, key, redlock.WithTTL(time.Minute))
		must(t, err)
		got := make(chan error, 1)
		go func() {
			l2, err := c.Acquire(ctx, key, redlock.WithBackoff(time.Hour, time.Hour))
			if err == nil {
				err = l2.Release(ctx)
			}
			got <- err
		}()
		subscribedOn(t, members, layout.WakeChannel(key))
		released := time.Now()
		must(t, l.Release(ctx))
		if err := <-got; err != nil {
			t.Fatalf("%s: waiter not woken by the release notice: %v", key, err)
		}
		t.Logf("%s (slot %d): waiter had the lock %v after the release", key, cluster.Slot(key), time.Since(released).Round(time.Millisecond))
		FreeOn(t, members, key)
	}
}

// subscribedOn waits (generously) until some node of every one of members
// has a subscriber on channel.
func subscribedOn(t *testing.T, members []*cluster.RedisCluster, channel string) {
	t.Helper()
	for i := 0; ; i++ {
		subscribed := 0
		for _, m := range members {
			n := 0
			for _, node := range m.Nodes {
				vals, err := redis.Values(node.Do("PUBSUB", "NUMSUB", channel))
				if err != nil || len(vals) != 2 {
					t.Fatalf("PUBSUB NUMSUB on %s: %v, %v", node.Addr(), vals, err)
				}
				k, _ := redis.Int(vals[1], nil)
				n += k
			}
			if n > 0 {
				subscribed++
			}
		}
		if subscribed == len(members) {
			return
		}
		if i == 1000 {
			t.Fatalf("%s subscribed on %d of %d members after 10s", channel, subscribed, len(members))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
