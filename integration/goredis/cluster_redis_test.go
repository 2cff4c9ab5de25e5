package goredis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/goredis"
	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/integration/conformance"
	"github.com/quorumlock/quorumlock/redlock"
)

// clusterMembers starts k quorum members, each a Redis Cluster of s
// primaries (redis-server processes), and returns one go-redis cluster
// client per member, closed by t.Cleanup.
func clusterMembers(t *testing.T, k, s int, opts ...cluster.Option) ([]*cluster.RedisCluster, []redis.UniversalClient) {
	t.Helper()
	members := cluster.StartRedisClusters(t, k, s, append([]cluster.Option{cluster.WithBackend(cluster.Process)}, opts...)...)
	clients := make([]redis.UniversalClient, k)
	for i, m := range members {
		cc := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:        m.Seeds(),
			DialTimeout:  time.Second,
			ReadTimeout:  time.Second,
			WriteTimeout: time.Second,
			MaxRedirects: 8,
		})
		t.Cleanup(func() { cc.Close() })
		clients[i] = cc
	}
	return members, clients
}

func TestNew_clusterMembers_everyLockKind(t *testing.T) {
	cluster.ForEachBackend(t, func(t *testing.T, b cluster.Backend) {
		testEveryLockKind(t, b)
	})
}

func testEveryLockKind(t *testing.T, b cluster.Backend) {
	members, clients := clusterMembers(t, 3, 3, cluster.WithBackend(b))
	c, err := goredis.New(clients, redlock.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conformance.ClusterKinds(t, c, members, 3)
	// A multi-key lock refused across slots left nothing on any member.
	ctx := context.Background()
	for i, cl := range clients {
		for _, k := range conformance.SlotKeys("cross", 2) {
			if n, err := cl.Exists(ctx, k).Result(); err != nil || n != 0 {
				t.Errorf("member %d: %s left behind (%d, %v)", i, k, n, err)
			}
		}
	}
}

// A waiter on cluster members is woken by the holder's release notice
// (conformance.ClusterReleaseNotice).
func TestNew_clusterMembers_releaseNoticeWakesWaiter(t *testing.T) {
	members, clients := clusterMembers(t, 3, 3)
	c, err := goredis.New(clients, redlock.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conformance.ClusterReleaseNotice(t, c, members, 3)
}

// Many first acquisitions at once on fresh cluster members: they share
// batches, and the nodes have not seen the scripts yet. None may fail
// for it (a NOSCRIPT from one node is not a refusal).
func TestNew_clusterMembers_concurrentFirstUse(t *testing.T) {
	_, clients := clusterMembers(t, 3, 3)
	c, err := goredis.New(clients, redlock.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 40
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			key := fmt.Sprintf("{first%d}:lock", i)
			opts := []redlock.LockOption{redlock.WithWait(0)}
			if i%2 == 1 {
				opts = append(opts, redlock.WithFencing())
			}
			l, err := c.Acquire(ctx, key, opts...)
			if err == nil {
				err = l.Release(ctx)
			}
			if err != nil {
				err = fmt.Errorf("%s: %w", key, err)
			}
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// Restart amnesia with members that are clusters: a lock held on a bare
// quorum (member 2's owning primary was down) whose owning primary in
// member 1 crashes and comes back at once without persistence lets a
// second client take the key — the hazard of docs/safety.md, which a
// failover to a replica that had not received the lock is too. With AOF
// appendfsync always the second client is refused.
func TestNew_clusterMembers_restartAmnesia(t *testing.T) {
	for _, persist := range []bool{false, true} {
		name := "no persistence"
		var opts []cluster.Option
		if persist {
			name = "AOF always"
			opts = append(opts, cluster.WithAOF())
		}
		t.Run(name, func(t *testing.T) {
			members, clients := clusterMembers(t, 3, 3, opts...)
			a, err := goredis.New(clients, redlock.WithTimeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := goredis.New(clients, redlock.WithTimeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const key = "{amnesia}:lock"
			owner := func(m int) *cluster.Node {
				t.Helper()
				n, err := members[m].Owner(cluster.Slot(key))
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			settle := func(m int) {
				t.Helper()
				if err := members[m].WaitReady(ctx); err != nil {
					t.Fatal(err)
				}
				// Let the member's go-redis client drop its broken connections.
				for i := 0; i < 3; i++ {
					_ = clients[m].(*redis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
						return c.Ping(ctx).Err()
					})
				}
			}

			// Member 2's owning primary is down while a takes the lock: a
			// holds members 0 and 1, a bare quorum.
			down := owner(2)
			if err := down.Kill(); err != nil {
				t.Fatal(err)
			}
			la, err := a.Acquire(ctx, key, redlock.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := down.Start(); err != nil {
				t.Fatal(err)
			}
			settle(2)
			// Member 1's owning primary crashes and restarts.
			if err := owner(1).Restart(); err != nil {
				t.Fatal(err)
			}
			settle(1)

			lb, err := b.TryAcquire(ctx, key, redlock.WithTTL(30*time.Second))
			if !persist {
				if err != nil {
					t.Fatalf("without persistence member 1 forgot a's lock, so b should win members 1 and 2: %v", err)
				}
				t.Logf("hazard shown: a (valid for %v more) and b both hold %q", time.Until(la.Until()).Round(time.Second), key)
				_ = lb.Release(ctx)
				return
			}
			if !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("with AOF always member 1 kept a's lock; b must be refused: %v", err)
			}
			if err := la.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
