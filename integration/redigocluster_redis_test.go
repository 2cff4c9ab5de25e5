package integration_test

// Quorum members that are Redis Clusters through the redigo transport
// (redigo.NewFromAddrs with cluster://SEED+SEED members).

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/integration/conformance"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
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

func newRedigoClusterClient(t *testing.T, specs []string, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redigo.NewFromAddrs(specs, append([]redlock.Option{redlock.WithTimeout(500 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Every lock kind over 3 members of 3 primaries, a key on each primary,
// on both backends (Docker's nodes announce 127.0.0.1 and their published
// ports, so every redirection stays on loopback).
func TestRedigoCluster_everyLockKind(t *testing.T) {
	cluster.ForEachBackend(t, func(t *testing.T, b cluster.Backend) {
		members := cluster.StartRedisClusters(t, 3, 3, cluster.WithBackend(b))
		specs := make([]string, len(members))
		for i, m := range members {
			specs[i] = "cluster://" + strings.Join(m.Seeds(), "+")
		}
		c := newRedigoClusterClient(t, specs, redlock.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))))
		conformance.ClusterKinds(t, c, members, 3)
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Clients contend for keys whose slots migrate from node to node in every
// member, back and forth, while locks are held: MOVED (and ASK while a
// migration runs) are followed, and no two holders ever overlap.
func TestRedigoCluster_movedDuringMigration(t *testing.T) {
	members, specs := redigoClusterMembers(t, 3, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const clients = 4
	cs := make([]*redlock.Client, clients)
	for i := range cs {
		cs[i] = newRedigoClusterClient(t, specs)
	}
	keys := conformance.SlotKeys("migrate", 3)[:2]

	var inside [2]atomic.Int32
	var overlaps, granted, refused atomic.Int64
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
					l, err := cs[i].Acquire(ctx, keys[k], redlock.WithTTL(5*time.Second), redlock.WithWait(time.Second))
					if err != nil {
						refused.Add(1)
						continue
					}
					granted.Add(1)
					if inside[k].Add(1) != 1 {
						overlaps.Add(1)
					}
					time.Sleep(2 * time.Millisecond) // the subject: a hold long enough for an overlap to show
					if time.Now().After(l.Until()) {
						t.Errorf("held past validity: the overlap check does not hold")
					}
					inside[k].Add(-1)
					_ = l.Release(ctx)
				}
			}()
		}
	}
	// Each key's slot goes to the next node and on, in every member at
	// once, three times round.
	moves := 0
	for round := 0; round < 3; round++ {
		for _, key := range keys {
			if err := cluster.MigrateOnward(ctx, members, cluster.Slot(key), 200*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			moves++
			time.Sleep(200 * time.Millisecond) // the subject: contention between slot moves
		}
	}
	before := granted.Load()
	time.Sleep(500 * time.Millisecond) // the subject: contention once the slots stay
	stopContenders()
	t.Logf("%d slot moves in each member; %d locks granted, %d attempts refused, %d overlaps", moves, granted.Load(), refused.Load(), overlaps.Load())
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping holders", overlaps.Load())
	}
	if granted.Load() == 0 || granted.Load() == before {
		t.Fatalf("no locks granted after the migrations (%d in all)", granted.Load())
	}
	// Every key is free again on every member, at its new owner.
	for _, key := range keys {
		for _, v := range conformance.ClusterHolders(t, members, key) {
			if v != "" {
				t.Errorf("%s left held (%q) after every holder released", key, v)
			}
		}
	}
}

// A slot half-migrated (MIGRATING on its owner, IMPORTING on another
// node): a key not on the owner is answered ASK, and the lock's commands
// run on the importing node after ASKING; the release finds the key there.
func TestRedigoCluster_askMidMigration(t *testing.T) {
	members, specs := redigoClusterMembers(t, 3, 3)
	c := newRedigoClusterClient(t, specs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := conformance.SlotKeys("ask", 3)[0]
	slot := cluster.Slot(key)
	// Warm the slot maps first, so the commands go to the owner.
	l, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	dsts := make([]*cluster.Node, len(members))
	for m, rc := range members {
		src, err := rc.Owner(slot)
		if err != nil {
			t.Fatal(err)
		}
		dst := rc.Nodes[(slices.Index(rc.Nodes, src)+1)%len(rc.Nodes)]
		dsts[m] = dst
		if _, err := dst.Do("CLUSTER", "SETSLOT", slot, "IMPORTING", src.ID()); err != nil {
			t.Fatal(err)
		}
		if _, err := src.Do("CLUSTER", "SETSLOT", slot, "MIGRATING", dst.ID()); err != nil {
			t.Fatal(err)
		}
	}
	// A script of many keys (fenced: the lock and its counter) whose keys
	// are not all on one side is refused by Redis (TRYAGAIN) until the
	// migration ends: each member fails it, saying why.
	if _, err := c.Acquire(ctx, key, redlock.WithFencing(), redlock.WithWait(0)); err == nil || !strings.Contains(err.Error(), "TRYAGAIN") {
		t.Fatalf("fenced acquire while every member migrates its slot: %v, want a TRYAGAIN failure", err)
	} else {
		t.Logf("fenced mid-migration: %v", err)
	}
	for _, kind := range []string{"plain", "plain again"} {
		l, err := c.Acquire(ctx, key, redlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatalf("%s: acquire mid-migration: %v", kind, err)
		}
		// The key is on the importing node of every member.
		n := 0
		if !redistest.Within(2*time.Second, func() bool {
			n = 0
			for _, dst := range dsts {
				if v, _ := askingGet(dst, key); v == l.Token() {
					n++
				}
			}
			return n == len(dsts)
		}) {
			t.Fatalf("%s: the token is on %d of %d importing nodes", kind, n, len(dsts))
		}
		if _, err := c.TryAcquire(ctx, key); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("%s: second acquirer mid-migration: %v, want ErrNotAcquired", kind, err)
		}
		st, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range st.Masters {
			if m.Err != nil || len(m.State.Holders) != 1 || m.State.Holders[0].Token != l.Token() {
				t.Errorf("%s: inspect %s mid-migration: %+v (err %v)", kind, m.Addr, m.State, m.Err)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%s: release mid-migration: %v", kind, err)
		}
		// Release returns once a quorum answered: the last member's
		// release may land a moment later. It must land.
		for _, dst := range dsts {
			var v string
			var err error
			if !redistest.Within(3*time.Second, func() bool {
				v, err = askingGet(dst, key)
				return v == "" && err == nil
			}) {
				t.Errorf("%s: after release the importing node %s has %q (%v)", kind, dst.Addr(), v, err)
			}
		}
	}
	// Finish the migrations; the lock works at the new owner (MOVED).
	for m, rc := range members {
		if err := rc.MigrateSlot(ctx, slot, dsts[m], 0); err != nil {
			t.Fatal(err)
		}
	}
	l, err = c.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("after the migration: %v", err)
	}
	conformance.HeldOn(members)(t, key, l.Token())
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// askingGet reads key on n after ASKING (n imports its slot).
func askingGet(n *cluster.Node, key string) (string, error) {
	conn, err := n.Pool().GetContext(context.Background())
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.Send("ASKING"); err != nil {
		return "", err
	}
	if err := conn.Send("GET", key); err != nil {
		return "", err
	}
	if err := conn.Flush(); err != nil {
		return "", err
	}
	if _, err := conn.Receive(); err != nil {
		return "", err
	}
	v, err := redis.String(conn.Receive())
	if errors.Is(err, redis.ErrNil) {
		return "", nil
	}
	return v, err
}

// A node SIGSTOPped inside one member: that member fails the keys of the
// node's slots (the quorum of the other two goes on), and still grants
// the keys of its other nodes; when the node resumes, the member grants
// its keys again.
func TestRedigoCluster_pausedNode(t *testing.T) {
	members, specs := redigoClusterMembers(t, 3, 3)
	c := newRedigoClusterClient(t, specs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ks := conformance.SlotKeys("paused", 3)
	for _, key := range ks { // warm the slot maps and connections
		l, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctx)
	}
	stopped, err := members[0].Owner(cluster.Slot(ks[0]))
	if err != nil {
		t.Fatal(err)
	}
	if err := stopped.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = stopped.Resume()
		}
	}()
	l, err := c.Acquire(ctx, ks[0], redlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatalf("the quorum of the other members: %v", err)
	}
	got := conformance.ClusterHolders(t, members[1:], ks[0])
	if conformance.Count(got, l.Token()) != 2 {
		t.Errorf("holders on members 1, 2: %q", got)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Keys of member 0's other nodes are still granted there.
	for _, key := range ks[1:] {
		l, err := c.Acquire(ctx, key, redlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		conformance.HeldOn(members)(t, key, l.Token())
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Member 0 alone is refused for the stopped node's key, naming the member.
	one := newRedigoClusterClient(t, specs[:1])
	_, err = one.TryAcquire(ctx, ks[0])
	seeds := members[0].Seeds()
	sort.Strings(seeds)
	if member := "cluster://" + strings.Join(seeds, "+"); err == nil || !strings.Contains(err.Error(), member) {
		t.Errorf("member 0 alone with its node stopped: %v", err)
	}
	t.Logf("member 0 alone: %v", err)
	if err := stopped.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	if err := members[0].WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		l, err := c.Acquire(ctx, ks[0], redlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ok := redistest.Within(time.Second, func() bool {
			return conformance.Count(conformance.ClusterHolders(t, members, ks[0]), l.Token()) == 3
		})
		_ = l.Release(ctx)
		if ok {
			break
		}
		if i == 50 {
			t.Fatal("member 0 never granted the key again after its node resumed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The conformance suite through the redigo cluster transport, on three
// members that are clusters of one primary each (the suite reads each
// member's keys on its one node).
func TestRedigoCluster_conformance(t *testing.T) {
	members := cluster.StartRedisClusters(t, 3, 1, cluster.WithBackend(cluster.Process))
	c := &cluster.Cluster{}
	for _, m := range members {
		c.Masters = append(c.Masters, m.Nodes[0].Master)
	}
	conformance.Cases(t, c, func(t *testing.T, addrs []string, opts ...redlock.Option) *redlock.Client {
		t.Helper()
		specs := make([]string, len(addrs))
		for i, a := range addrs {
			specs[i] = "cluster://" + a
		}
		cl, err := redigo.NewFromAddrs(specs, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	})
}

// A waiter on cluster members is woken by the holder's release notice
// (conformance.ClusterReleaseNotice).
func TestRedigoCluster_releaseNoticeWakesWaiter(t *testing.T) {
	members, specs := redigoClusterMembers(t, 3, 3)
	conformance.ClusterReleaseNotice(t, newRedigoClusterClient(t, specs), members, 3)
}
