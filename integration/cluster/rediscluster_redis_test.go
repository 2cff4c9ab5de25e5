package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/integration/cluster"
)

func TestStartRedisClusters_slotsSplitAndServed(t *testing.T) {
	cluster.ForEachBackend(t, testSlotsSplitAndServed)
}

func testSlotsSplitAndServed(t *testing.T, b cluster.Backend) {
	members := cluster.StartRedisClusters(t, 2, 3, cluster.WithBackend(b))
	if len(members) != 2 {
		t.Fatalf("%d members, want 2", len(members))
	}
	for _, rc := range members {
		if len(rc.Nodes) != 3 || len(rc.Seeds()) != 3 {
			t.Fatalf("%v: %d nodes, want 3", rc, len(rc.Nodes))
		}
		for i, slot := range []int{0, cluster.Slots/3 - 1, cluster.Slots / 3, cluster.Slots - 1} {
			o, err := rc.Owner(slot)
			if err != nil {
				t.Fatal(err)
			}
			if want := rc.Nodes[[]int{0, 0, 1, 2}[i]]; o != want {
				t.Errorf("%v: slot %d owned by %s, want %s", rc, slot, o.Addr(), want.Addr())
			}
		}
	}
	// The two members are independent clusters: a node of one does not
	// know the other's.
	info, err := redis.String(members[0].Nodes[0].Do("CLUSTER", "NODES"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range members[1].Nodes {
		if strings.Contains(info, n.ID()) {
			t.Errorf("member 0 knows member 1's node %s", n.Addr())
		}
	}
}

func TestRedisCluster_MigrateSlot_movesKeysAndRedirects(t *testing.T) {
	cluster.ForEachBackend(t, testMigrateSlot)
}

func testMigrateSlot(t *testing.T, b cluster.Backend) {
	rc := cluster.StartRedisClusters(t, 1, 3, cluster.WithBackend(b))[0]
	const key = "{mig}:k"
	slot := cluster.Slot(key)
	src, err := rc.Owner(slot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Do("SET", key, "v", "PX", 60000); err != nil {
		t.Fatal(err)
	}
	dst := rc.Nodes[0]
	if dst == src {
		dst = rc.Nodes[1]
	}

	// Hold the slot half-migrated: the owner answers ASK for a key it
	// does not have, and still serves the one it has.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- rc.MigrateSlot(ctx, slot, dst, 300*time.Millisecond) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := src.Do("GET", "{mig}:absent")
		if err != nil && strings.HasPrefix(err.Error(), "ASK ") {
			if !strings.Contains(err.Error(), dst.Addr()) {
				t.Errorf("ASK names %q, want %s", err, dst.Addr())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ASK from the migrating owner; last reply error %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	if o, err := rc.Owner(slot); err != nil || o != dst {
		t.Fatalf("owner after migration %v (%v), want %s", o, err, dst.Addr())
	}
	_, err = src.Do("GET", key)
	if err == nil || !strings.HasPrefix(err.Error(), "MOVED ") || !strings.Contains(err.Error(), dst.Addr()) {
		t.Errorf("old owner answered GET with %v, want MOVED to %s", err, dst.Addr())
	}
	if v, err := redis.String(dst.Do("GET", key)); err != nil || v != "v" {
		t.Errorf("new owner GET = %q, %v; want the migrated value", v, err)
	}
	if pttl, err := redis.Int64(dst.Do("PTTL", key)); err != nil || pttl <= 0 || pttl > 60000 {
		t.Errorf("PTTL after migration = %d, %v; want the key's TTL kept", pttl, err)
	}
}

func TestRedisCluster_killedNodeKeepsSlotsLosesKeys(t *testing.T) {
	cluster.ForEachBackend(t, testKilledNode)
}

func testKilledNode(t *testing.T, b cluster.Backend) {
	rc := cluster.StartRedisClusters(t, 1, 2, cluster.WithBackend(b))[0]
	const key = "{amnesia}:k"
	o, err := rc.Owner(cluster.Slot(key))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Do("SET", key, "v"); err != nil {
		t.Fatal(err)
	}
	if err := o.Restart(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if o2, err := rc.Owner(cluster.Slot(key)); err != nil || o2 != o {
		t.Fatalf("owner after restart %v (%v), want %s: nodes.conf keeps the slots", o2, err, o.Addr())
	}
	if v := get(t, o.Master, key); v != "" {
		t.Errorf("a restarted primary without persistence kept its key (%q)", v)
	}
}

// Every address a client is told about is one it can dial: 127.0.0.1 and
// a node's own published port, in CLUSTER SLOTS and in MOVED.
func TestStartRedisClusters_announcesClientAddresses(t *testing.T) {
	cluster.ForEachBackend(t, func(t *testing.T, b cluster.Backend) {
		rc := cluster.StartRedisClusters(t, 1, 3, cluster.WithBackend(b))[0]
		ranges, err := redis.Values(rc.Nodes[0].Do("CLUSTER", "SLOTS"))
		if err != nil {
			t.Fatal(err)
		}
		seeds := strings.Join(rc.Seeds(), " ")
		for _, r := range ranges {
			f, _ := redis.Values(r, nil)
			p, _ := redis.Values(f[2], nil)
			host, _ := redis.String(p[0], nil)
			port, _ := redis.Int(p[1], nil)
			addr := fmt.Sprintf("%s:%d", host, port)
			if !strings.Contains(seeds, addr) {
				t.Errorf("CLUSTER SLOTS names %s, not one of the published addresses %s", addr, seeds)
			}
		}
		const key = "{announce}:k"
		owner, err := rc.Owner(cluster.Slot(key))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range rc.Nodes {
			if n == owner {
				continue
			}
			_, err := n.Do("GET", key)
			if err == nil || !strings.HasSuffix(err.Error(), " "+owner.Addr()) {
				t.Errorf("GET on a node that does not own the slot: %v, want MOVED to %s", err, owner.Addr())
			}
		}
	})
}

// Replicas and failover: every node a client is told about (replicas too)
// is 127.0.0.1 and a published port; a coordinated failover keeps every
// acknowledged write; a TAKEOVER after the primary's replication links
// were cut (DropReplicas) and the primary killed forgets the writes made
// since — the failover amnesia hazard — and the old primary, started
// again, rejoins as a replica.
func TestRedisCluster_Failover(t *testing.T) {
	cluster.ForEachBackend(t, testFailover)
}

func testFailover(t *testing.T, b cluster.Backend) {
	// No automatic failover (a replica would promote itself once its
	// primary has been down for cluster-node-timeout): only the ones the
	// test asks for.
	rc := cluster.StartRedisClusters(t, 1, 2, cluster.WithBackend(b), cluster.WithReplicas(1),
		cluster.WithConfig("cluster-replica-no-failover", "yes"))[0]
	if len(rc.Nodes) != 4 {
		t.Fatalf("%v: %d nodes, want 4", rc, len(rc.Nodes))
	}
	for i, n := range rc.Nodes {
		role, err := rc.Role(n)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"primary", "primary", "replica", "replica"}[i]; role != want {
			t.Errorf("node %d (%s) is a %s, want a %s", i, n.Addr(), role, want)
		}
	}
	if ps, err := rc.Primaries(); err != nil || len(ps) != 2 {
		t.Fatalf("Primaries = %d nodes (%v), want 2", len(ps), err)
	}
	// CLUSTER SLOTS lists a replica once the node has heard (by gossip)
	// that it has replicated something.
	var ranges []any
	for i := 0; ; i++ {
		var err error
		ranges, err = redis.Values(rc.Nodes[0].Do("CLUSTER", "SLOTS"))
		if err != nil {
			t.Fatal(err)
		}
		complete := true
		for _, r := range ranges {
			if f, _ := redis.Values(r, nil); len(f) != 4 {
				complete = false
			}
		}
		if complete {
			break
		}
		if i == 200 {
			t.Fatalf("CLUSTER SLOTS %v: want a primary and one replica per range", ranges)
		}
		time.Sleep(50 * time.Millisecond)
	}
	seeds := strings.Join(rc.Seeds(), " ")
	for _, r := range ranges {
		f, _ := redis.Values(r, nil)
		for _, e := range f[2:] {
			p, _ := redis.Values(e, nil)
			host, _ := redis.String(p[0], nil)
			port, _ := redis.Int(p[1], nil)
			if addr := fmt.Sprintf("%s:%d", host, port); !strings.Contains(seeds, addr) {
				t.Errorf("CLUSTER SLOTS names %s, not one of the published addresses %s", addr, seeds)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const key = "{failover}:k"
	slot := cluster.Slot(key)
	first, err := rc.Owner(slot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Do("SET", key, "kept"); err != nil {
		t.Fatal(err)
	}

	// Coordinated: the replica catches up first, so the key survives.
	second, err := rc.Failover(ctx, slot, cluster.FailoverCoordinated)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("Failover returned the old primary")
	}
	if v := get(t, second.Master, key); v != "kept" {
		t.Errorf("after a coordinated failover the new primary has %q, want %q", v, "kept")
	}
	if role, err := rc.Role(first); err != nil || role != "replica" {
		t.Errorf("the old primary is a %q (%v), want a replica", role, err)
	}

	// Takeover after the replica lost its link: the write made since is
	// lost.
	if err := first.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := second.DropReplicas(); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Do("SET", key, "lost"); err != nil {
		t.Fatal(err)
	}
	if err := second.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := first.Resume(); err != nil {
		t.Fatal(err)
	}
	shortCtx, shortCancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = rc.Failover(shortCtx, slot, cluster.FailoverCoordinated)
	shortCancel()
	if err == nil {
		t.Fatal("a coordinated failover succeeded with the primary down")
	} else {
		t.Logf("coordinated failover with the primary down: %v", err)
	}
	third, err := rc.Failover(ctx, slot, cluster.FailoverTakeover)
	if err != nil {
		t.Fatal(err)
	}
	if third != first {
		t.Fatalf("TAKEOVER promoted %s, want %s", third.Addr(), first.Addr())
	}
	if v := get(t, third.Master, key); v != "kept" {
		t.Errorf("after the takeover the new primary has %q, want the last write it received, %q (amnesia of %q)", v, "kept", "lost")
	}
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	if err := rc.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if role, err := rc.Role(second); err != nil || role != "replica" {
		t.Errorf("the killed primary came back as a %q (%v), want a replica", role, err)
	}
	if v := getOnReplica(t, second, key); v != "kept" {
		t.Errorf("the old primary, now a replica, has %q, want %q", v, "kept")
	}
}

// A coordinated failover whose election cannot reach a majority before
// Redis gives up on it (the other primary frozen past Redis's 5 s
// manual-failover timeout) is asked for again, and happens once that
// primary is back: Redis itself never tries a given-up manual failover
// again. Processes only: the retry does not depend on the backend.
func TestRedisCluster_FailoverAskedAgainAfterRedisGivesUp(t *testing.T) {
	rc := cluster.StartRedisClusters(t, 1, 2, cluster.WithBackend(cluster.Process), cluster.WithReplicas(1),
		cluster.WithConfig("cluster-replica-no-failover", "yes"))[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "{again}:k"
	slot := cluster.Slot(key)
	owner, err := rc.Owner(slot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Do("SET", key, "kept"); err != nil {
		t.Fatal(err)
	}
	var voter *cluster.Node
	ps, err := rc.Primaries()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p != owner {
			voter = p
		}
	}
	if voter == nil {
		t.Fatalf("no primary besides %s among %d", owner.Addr(), len(ps))
	}
	if err := voter.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := make(chan error, 1)
	go func() {
		time.Sleep(6 * time.Second) // the subject: the election outlasts Redis's manual-failover timeout
		resumed <- voter.Resume()
	}()
	start := time.Now()
	promoted, err := rc.Failover(ctx, slot, cluster.FailoverCoordinated)
	if rerr := <-resumed; rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("promoted %s after %v", promoted.Addr(), time.Since(start).Round(time.Millisecond))
	if promoted == owner {
		t.Fatal("Failover returned the old primary")
	}
	if v := get(t, promoted.Master, key); v != "kept" {
		t.Errorf("the new primary has %q, want %q", v, "kept")
	}
}

// getOnReplica reads key on a replica (READONLY, else it answers MOVED).
func getOnReplica(t *testing.T, n *cluster.Node, key string) string {
	t.Helper()
	c, err := redis.Dial("tcp", n.Addr(), redis.DialReadTimeout(2*time.Second), redis.DialWriteTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Do("READONLY"); err != nil {
		t.Fatal(err)
	}
	v, err := redis.String(c.Do("GET", key))
	if err != nil && err != redis.ErrNil {
		t.Fatalf("GET on replica %s: %v", n.Addr(), err)
	}
	return v
}

// FailoverForce with the owner paused: the other primaries vote, the
// replica takes over with what it has, and the old primary, resumed,
// becomes its replica.
func TestRedisCluster_FailoverForce(t *testing.T) {
	cluster.ForEachBackend(t, func(t *testing.T, b cluster.Backend) {
		rc := cluster.StartRedisClusters(t, 1, 3, cluster.WithBackend(b), cluster.WithReplicas(1),
			cluster.WithConfig("cluster-replica-no-failover", "yes"))[0]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const key = "{force}:k"
		slot := cluster.Slot(key)
		old, err := rc.Owner(slot)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := old.Do("SET", key, "v"); err != nil {
			t.Fatal(err)
		}
		if _, err := old.Do("WAIT", 1, 5000); err != nil {
			t.Fatal(err)
		}
		if err := old.Pause(); err != nil {
			t.Fatal(err)
		}
		np, err := rc.Failover(ctx, slot, cluster.FailoverForce)
		if err != nil {
			t.Fatal(err)
		}
		if v := get(t, np.Master, key); v != "v" {
			t.Errorf("the promoted replica has %q, want the replicated %q", v, "v")
		}
		if err := old.Resume(); err != nil {
			t.Fatal(err)
		}
		if err := rc.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		if role, err := rc.Role(old); err != nil || role != "replica" {
			t.Errorf("the old primary, resumed, is a %q (%v), want a replica", role, err)
		}
		if ps, err := rc.Primaries(); err != nil || len(ps) != 3 {
			t.Errorf("Primaries = %d (%v), want 3", len(ps), err)
		}
	})
}
