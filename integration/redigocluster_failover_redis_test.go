package integration_test

// Failovers of a cluster member's primary through the redigo transport
// the go-redis forms are in goredis/cluster_failover_test.go.

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/redlock"
)

func redigoClusterMembersWith(t *testing.T, k, s int, opts ...cluster.Option) ([]*cluster.RedisCluster, []string) {
	t.Helper()
	members := cluster.StartRedisClusters(t, k, s, append([]cluster.Option{cluster.WithBackend(cluster.Process)}, opts...)...)
	specs := make([]string, k)
	for i, m := range members {
		specs[i] = "cluster://" + strings.Join(m.Seeds(), "+")
	}
	return members, specs
}

// Coordinated failovers (CLUSTER FAILOVER) of the key's primary on every
// member in turn, twice round, while clients contend: the replica takes
// over only once it has every grant, so no two holders ever overlap, and
// the transport finds the new primary (MOVED from the old one).
func TestRedigoCluster_coordinatedFailover(t *testing.T) {
	members, specs := redigoClusterMembersWith(t, 3, 1, cluster.WithReplicas(1))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const clients = 4
	const key = "{redigo-failover}:lock"
	var inside atomic.Int32
	var overlaps, granted, refused atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		c := newRedigoClusterClient(t, specs, redlock.WithTimeout(300*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := c.Acquire(ctx, key, redlock.WithTTL(1500*time.Millisecond), redlock.WithWait(time.Second))
				if err != nil {
					refused.Add(1)
					continue
				}
				granted.Add(1)
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				time.Sleep(2 * time.Millisecond) // the subject: a hold long enough for an overlap to show
				inside.Add(-1)
				_ = l.Release(ctx)
			}
		}()
	}
	failovers := 0
	var before int64
	for round := 0; round < 2; round++ {
		for _, rc := range members {
			if _, err := rc.Failover(ctx, cluster.Slot(key), cluster.FailoverCoordinated); err != nil {
				close(stop)
				wg.Wait()
				t.Fatal(err)
			}
			failovers++
			before = granted.Load()
			for i := 0; i < 200 && granted.Load() < before+5; i++ {
				time.Sleep(25 * time.Millisecond)
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d coordinated failovers, 3 members of 1 primary + 1 replica: %d locks granted, %d attempts refused, %d overlaps",
		failovers, granted.Load(), refused.Load(), overlaps.Load())
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping holders", overlaps.Load())
	}
	if granted.Load() <= before {
		t.Fatal("no lock granted after the last failover")
	}
}

// The failover amnesia hazard through the redigo transport: on members 0
// and 1 the key's replica is cut off before a takes the lock, the primary
// freezes and the replica is promoted at once (TAKEOVER): b wins members
// 0 and 1 while a's lock is valid — the hazard docs/safety.md describes,
// asserted as such.
func TestRedigoCluster_failoverAmnesia(t *testing.T) {
	members, specs := redigoClusterMembersWith(t, 3, 1, cluster.WithReplicas(1),
		cluster.WithConfig("cluster-replica-no-failover", "yes"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := newRedigoClusterClient(t, specs)
	b := newRedigoClusterClient(t, specs)
	const key = "{redigo-amnesia}:lock"
	slot := cluster.Slot(key)
	var primaries, replicas []*cluster.Node
	for _, rc := range members[:2] {
		p, err := rc.Owner(slot)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := rc.Replicas(p)
		if err != nil || len(rs) != 1 {
			t.Fatalf("%v: replicas of %s: %d (%v)", rc, p.Addr(), len(rs), err)
		}
		if err := rs[0].Pause(); err != nil {
			t.Fatal(err)
		}
		if err := p.DropReplicas(); err != nil {
			t.Fatal(err)
		}
		primaries, replicas = append(primaries, p), append(replicas, rs[0])
	}
	la, err := a.Acquire(ctx, key, redlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range primaries {
		if err := primaries[i].Pause(); err != nil {
			t.Fatal(err)
		}
		if err := replicas[i].Resume(); err != nil {
			t.Fatal(err)
		}
	}
	for _, rc := range members[:2] {
		if _, err := rc.Failover(ctx, slot, cluster.FailoverTakeover); err != nil {
			t.Fatal(err)
		}
	}
	// b tries a few rounds: its transport finds the new primaries once a
	// round to the frozen ones has failed.
	var lb *redlock.Lock
	for i := 0; i < 20; i++ {
		if lb, err = b.TryAcquire(ctx, key, redlock.WithTTL(30*time.Second)); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("b could not take the key on the promoted replicas, which never had a's lock: %v", err)
	}
	left := time.Until(la.Until())
	if left <= 0 {
		t.Fatalf("a's lock had already ended when b took the key: the hazard was not shown")
	}
	t.Logf("hazard shown: a (valid for %v more) and b both hold %q", left.Round(time.Millisecond), key)
	_ = lb.Release(context.WithoutCancel(ctx))
}
