package goredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/adaptertest"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// A reply that a master sends after the command's deadline (it was
// stopped, SIGSTOP, and runs again within the limit) is delivered, not
// dropped: the Client decides how long it waits, and a late answer is how
// it learns that its masters answer late. Meanwhile the lane is down for
// commands worthless late whose budget the master's silence has used up.
func TestLane_lateReplyIsDelivered(t *testing.T) {
	s, l := connectedLane(t)
	s.stop()
	resumed := false
	defer func() {
		if !resumed {
			s.cont()
		}
	}()
	start := time.Now()
	const budget = 100 * time.Millisecond
	late, lateCh := cmd(budget, "SET", "a", "1", "NX", "PX", 10000)
	l.send(late)
	taken(t, l, late, false)
	if el := untilDown(t, l).Sub(start); el < budget {
		t.Fatalf("down after %v, before the command's deadline", el)
	}
	drop, dropCh := cmd(budget, "SET", "c", "1", "NX", "PX", 10000)
	drop.dropWhenDown = true
	l.send(drop)
	if res := wait(t, dropCh); !errors.Is(res.err, errDown) || res.sent {
		t.Fatalf("dropWhenDown while down: %+v, want errDown, unsent", res)
	}
	select {
	case res := <-lateCh:
		t.Fatalf("settled before its reply came, %v after its send: %+v", time.Since(start), res)
	default:
	}
	s.cont()
	resumed = true
	res := wait(t, lateCh)
	el := time.Since(start)
	if res.err != nil || res.v != "OK" || !res.sent {
		t.Fatalf("a reply after the deadline, within the limit: %+v (after %v), want OK", res, el)
	}
	if el < budget {
		t.Fatalf("answered after %v, within its deadline: the case this test checks did not occur", el)
	}
}

// Every master answers an acquisition in 80 ms, past the 50 ms per-master
// timeout: the host is slow, no master is down. The first attempts fail
// (the Client has seen nothing yet), but their late answers reach it, so
// it learns to wait for them: from then on every attempt succeeds. When
// the lane dropped a reply read after the command's deadline, every
// attempt failed.
func TestClient_slowMastersAreWaitedFor(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, startServer(t).addr)
	}
	var clients []redis.UniversalClient
	for _, a := range adaptertest.SlowSetProxies(t, addrs, 80*time.Millisecond) {
		c := redis.NewClient(&redis.Options{Addr: a, Protocol: 2})
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	c, err := New(clients, redlock.WithTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adaptertest.SlowMastersAreWaitedFor(t, c)
}

// One master of three stopped (SIGSTOP) while a lock is acquired and
// extended on the other two, and run again within the lane's limit: its
// answers to the SET and to the extension are read late, and delivered
// now (the Client learns from them). Neither moves the lock's validity:
// it is counted from each call's start, from the quorum's answers, and a
// late answer never lengthens it.
func TestLateAnswer_stoppedMasterNeverExtendsValidity(t *testing.T) {
	const ttl = 2 * time.Second
	var ts []*Transport
	var servers []*server
	for range 3 {
		s := startServer(t)
		servers = append(servers, s)
		ts = append(ts, NewTransport(newClient(t, s)))
	}
	c, err := redlock.NewWithTransports([]transport.Transport{ts[0], ts[1], ts[2]}, redlock.WithTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if l, err := c.TryAcquire(ctx, "late:warm"); err != nil {
		t.Fatal(err)
	} else {
		_ = l.Release(ctx)
	}
	stopped := servers[2]
	stopped.stop()
	resumed := false
	defer func() {
		if !resumed {
			stopped.cont()
		}
	}()
	start := time.Now()
	l, err := c.TryAcquire(ctx, "late:v", redlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("TryAcquire with one master of three stopped: %v", err)
	}
	acquired := l.Until()
	if acquired.After(start.Add(ttl)) {
		t.Fatalf("validity until %v, past the call's start plus the TTL (%v)", acquired.Sub(start), ttl)
	}
	extStart := time.Now()
	if err := l.Extend(ctx, ttl); err != nil {
		t.Fatalf("Extend with one master of three stopped: %v", err)
	}
	extended := l.Until()
	if extended.After(extStart.Add(ttl)) {
		t.Fatalf("validity until %v after the extension's start, past its TTL (%v)", extended.Sub(extStart), ttl)
	}
	stopped.cont()
	resumed = true
	// Its late answers are read: nothing is in flight on its lane.
	waitForWithin(t, 5*time.Second, "the stopped master's late answers are read", func() bool {
		ts[2].lane.mu.Lock()
		defer ts[2].lane.mu.Unlock()
		return len(ts[2].lane.inflight) == 0 && len(ts[2].lane.queue) == 0
	})
	if got := l.Until(); !got.Equal(extended) {
		t.Fatalf("validity moved by %v after the stopped master's late answers", got.Sub(extended))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
