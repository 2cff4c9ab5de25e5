package integration_test

// The redigo cluster transport against faults of real Redis Clusters.

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/integration/conformance"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// deadLoopbackAddr returns a 127.0.0.1 address nothing listens on.
func deadLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A member whose first seed is down (a node that left the cluster, a
// typo): "any one that answers will do" (docs/operations.md). Its first
// call is granted too (a command never written to the dead seed goes to
// the next seed, which sends it on with MOVED, or to the slot's owner once
// a read of the slot map, passing over the dead seeds too, told it; that
// first call of a client of one master is the first command dialed for),
// later ones once the other seeds told the slot map; Inspect reads it;
// nothing is left behind.
func TestClusterMember_firstSeedDownStillGrants(t *testing.T) {
	members := cluster.StartRedisClusters(t, 1, 2, cluster.WithBackend(cluster.Process))
	// Two dead seeds first: each is passed over in turn.
	spec := "cluster://" + deadLoopbackAddr(t) + "+" + deadLoopbackAddr(t) + "+" + strings.Join(members[0].Seeds(), "+")
	c := newRedigoClusterClient(t, []string{spec})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, key := range conformance.SlotKeys("seed", 2) {
		l, err := c.TryAcquire(ctx, key, redlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatalf("key %d: a member with live seeds refused %s: %v", i, key, err)
		}
		if got := conformance.ClusterHolders(t, members, key); got[0] == "" {
			t.Errorf("%s: not held on its owner after Acquire", key)
		}
		in, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range in.Masters {
			if m.Err != nil {
				t.Errorf("Inspect of %s on the member: %v", key, m.Err)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := conformance.ClusterHolders(t, members, key); got[0] != "" {
			t.Errorf("%s: left behind after Release: %q", key, got[0])
		}
	}
}

// Fenced locks and write locks contended for while their slot migrates
// back and forth in every member (MOVED, ASK and, for the scripts of many
// keys, TRYAGAIN): no two holders overlap, fencing tokens grow in the
// order the holders entered, and a key is free at the end.
func TestClusterMember_kindsExcludeDuringSlotMigration(t *testing.T) {
	members, specs := redigoClusterMembers(t, 3, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const clients = 3
	cs := make([]*redlock.Client, clients)
	for i := range cs {
		cs[i] = newRedigoClusterClient(t, specs)
	}
	keys := conformance.SlotKeys("kinds", 3)[:2] // [0] fenced, [1] write
	var mu sync.Mutex
	var inside [2]int
	var lastFence uint64
	var overlaps, backwards, granted [2]atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// The contenders stop (and are waited for) also when a migration
	// fails the test: no goroutine outlives it.
	stopContenders := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopContenders()
	for i := 0; i < clients; i++ {
		for k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					var l *redlock.Lock
					var err error
					if k == 0 {
						l, err = cs[i].Acquire(ctx, keys[k], redlock.WithFencing(), redlock.WithTTL(5*time.Second), redlock.WithWait(time.Second))
					} else {
						l, err = cs[i].AcquireWrite(ctx, keys[k], redlock.WithTTL(5*time.Second), redlock.WithWait(time.Second))
					}
					if err != nil {
						continue
					}
					granted[k].Add(1)
					mu.Lock()
					inside[k]++
					if inside[k] != 1 {
						overlaps[k].Add(1)
					}
					if k == 0 {
						if l.Fence() <= lastFence {
							backwards[k].Add(1)
						}
						lastFence = l.Fence()
					}
					mu.Unlock()
					time.Sleep(2 * time.Millisecond) // the subject: a hold long enough for an overlap to show
					mu.Lock()
					inside[k]--
					mu.Unlock()
					if time.Now().After(l.Until()) {
						t.Errorf("held past validity: the overlap check does not hold")
					}
					_ = l.Release(ctx)
				}
			}()
		}
	}
	for round := 0; round < 2; round++ {
		for _, key := range keys {
			if err := cluster.MigrateOnward(ctx, members, cluster.Slot(key), 200*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	time.Sleep(300 * time.Millisecond) // the subject: the contenders run on a spell after the last migration
	stopContenders()
	for k, name := range []string{"fenced", "write"} {
		t.Logf("%s: %d granted, %d overlaps, %d fences backwards", name, granted[k].Load(), overlaps[k].Load(), backwards[k].Load())
		if overlaps[k].Load() != 0 || backwards[k].Load() != 0 {
			t.Errorf("%s: %d overlapping holders, %d fences not growing", name, overlaps[k].Load(), backwards[k].Load())
		}
		if granted[k].Load() == 0 {
			t.Errorf("%s: no lock granted", name)
		}
	}
	// Release returns once a quorum answered: the last member's release
	// may land a moment later. It must land.
	for i := 0; ; i++ {
		left := slices.DeleteFunc(conformance.ClusterHolders(t, members, keys[0]), func(v string) bool { return v == "" })
		if len(left) == 0 {
			break
		}
		if i == 300 {
			t.Errorf("%s left held (%q) after every holder released", keys[0], left)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The write lock is free on every member: a TryAcquireWrite is granted.
	w, err := cs[0].AcquireWrite(ctx, keys[1], redlock.WithWait(0))
	if err != nil {
		t.Fatalf("the write lock is not free after every holder released: %v", err)
	}
	_ = w.Release(ctx)
}

// A Client of two cluster members and one single master, one cluster
// member wholly down (every node stopped): the quorum of the other two
// grants and releases, the down member's error names it, and Close is
// prompt.
func TestClusterMember_oneClusterDownOthersGrant(t *testing.T) {
	members, specs := redigoClusterMembers(t, 2, 2)
	single := cluster.Start(t, 1, cluster.WithBackend(cluster.Process))
	all := append(slices.Clone(specs), single.Addrs()[0])
	c, err := redigo.NewFromAddrs(all, redlock.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "{mixed}:lock")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range members[0].Nodes {
		if err := n.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range conformance.SlotKeys("mixed", 2) {
		l, err := c.Acquire(ctx, key, redlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatalf("two members of three are up: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The down member alone: its error names it.
	one, err := redigo.NewFromAddrs(specs[:1], redlock.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = one.TryAcquire(ctx, "{mixed}:lock")
	if err == nil {
		t.Fatal("a member wholly down granted a lock")
	}
	for _, seed := range members[0].Seeds() {
		if !strings.Contains(err.Error(), seed) {
			t.Errorf("a member wholly down: %v, want an error naming it (seed %s)", err, seed)
		}
	}
	t.Logf("%v", err)
	start := time.Now()
	one.Close()
	c.Close()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close took %v", took)
	}
}
