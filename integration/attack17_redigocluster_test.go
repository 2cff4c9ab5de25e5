package integration_test

// Attack on issue 17 (the redigo cluster transport) on real Redis
// Clusters.

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/integration/cluster"
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
// typo): the other seeds tell the slot map, and locks are granted and
// released on it, with nothing left behind. Keyless commands (the first
// contact's identity probe) go to the first seed only.
func TestAttack17_firstSeedDown(t *testing.T) {
	members := cluster.StartRedisClusters(t, 1, 2, cluster.WithBackend(cluster.Process))
	dead := deadLoopbackAddr(t)
	spec := "cluster://" + dead + "+" + strings.Join(members[0].Seeds(), "+")
	c := newRedigoClusterClient(t, []string{spec})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var lastErr error
	for i, key := range slotKeys("seed", 2) {
		var l *redlock.Lock
		for try := 0; try < 5 && l == nil; try++ {
			l, lastErr = c.TryAcquire(ctx, key, redlock.WithTTL(30*time.Second))
			if lastErr != nil {
				t.Logf("key %d, try %d: %v", i, try, lastErr)
				time.Sleep(200 * time.Millisecond)
			}
		}
		if l == nil {
			t.Fatalf("a member with two live seeds out of three granted no lock on %s in 5 tries: %v", key, lastErr)
		}
		if got := holdersOn(t, members, key); got[0] == "" {
			t.Errorf("%s: not held on its owner after Acquire", key)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := holdersOn(t, members, key); got[0] != "" {
			t.Errorf("%s: left behind after Release: %q", key, got[0])
		}
	}
}
