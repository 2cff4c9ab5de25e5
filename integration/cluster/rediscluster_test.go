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
