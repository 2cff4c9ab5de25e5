package redlock_test

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// slowMaster is a proxy in front of s that delays every script by 30 ms: a
// master farther away than the others, whose answers come after theirs.
func slowMaster(t *testing.T, s *redistest.Server) string {
	slow := func(c *hostile.Conn, cmd []string) hostile.Verdict {
		if cmd[0] != "EVALSHA" && cmd[0] != "EVAL" {
			return hostile.Forward
		}
		select {
		case <-time.After(30 * time.Millisecond):
		case <-c.Quit():
		}
		return hostile.Forward
	}
	return hostile.NewProxy(t, s.Addr(), slow).Addr()
}

// A master that lost the lock is healed even when it answers after the
// others: an extension returns at a quorum of Yes before the lost
// master's No, and a later extension puts the lock back there.
func TestHeal_slowestMasterIsHealedToo(t *testing.T) {
	servers := redistest.Start(t, 3)
	c := addrClient(t, pipelinedPath, []string{servers[0].Addr(), servers[1].Addr(), slowMaster(t, servers[2])})
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "job", redlock.WithTTL(5*time.Second), redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	rs := &realSet{servers: servers}
	if !redistest.WaitFor(ctx, func() bool { return count(rs.values(t, "job"), l.Token()) == 3 }) {
		t.Fatalf("not on every master: %v", rs.values(t, "job"))
	}
	if _, err := servers[2].Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	// Its refusal comes after each extension returned: a later extension
	// heals it.
	extensions := 0
	if !redistest.Within(3*time.Second, func() bool {
		extensions++
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		return rs.values(t, "job")[2] == l.Token()
	}) {
		t.Errorf("the slowest master was not healed after %d extensions: %v", extensions, rs.values(t, "job"))
	}
}

// Fencing tokens go forward across a restart (without data) of each of two
// masters in turn while the lock is held and extended, as "Locks that
// heal" argues, also when the first master to restart is the slowest to
// answer: the next grant, by the two masters that restarted (the third
// frozen), is above the holder's.
func TestHeal_fenceGoesForwardAfterTwoRestartsWhileHeld(t *testing.T) {
	servers := redistest.Start(t, 3)
	addrs := []string{servers[0].Addr(), servers[1].Addr(), slowMaster(t, servers[2])}
	c := addrClient(t, pipelinedPath, addrs)
	ctx := ctxT(t)
	for i := 0; i < 3; i++ { // raise the counter everywhere
		l, err := c.Acquire(ctx, "job", redlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rs := &realSet{servers: servers}
	if !redistest.WaitFor(ctx, func() bool { return count(rs.values(t, "job"), "") == 3 }) {
		t.Fatal("not released everywhere")
	}
	l, err := c.Acquire(ctx, "job", redlock.WithTTL(5*time.Second), redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	if !redistest.WaitFor(ctx, func() bool { return count(rs.values(t, "job"), l.Token()) == 3 }) {
		t.Fatalf("not on every master: %v", rs.values(t, "job"))
	}
	// Master 2 restarts without data; the holder extends a few times
	// (each may heal); then master 0 restarts too.
	if _, err := servers[2].Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if !redistest.Within(3*time.Second, func() bool {
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		return rs.values(t, "job")[2] == l.Token()
	}) {
		t.Fatalf("master 2 not healed by the extensions: %v", rs.values(t, "job"))
	}
	t.Logf("before master 0 restarts: %v (holder %s)", rs.values(t, "job"), l.Token())
	if _, err := servers[0].Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	ext := l.Extend(ctx, 5*time.Second)
	rel := l.Release(ctx)
	t.Logf("after master 0 restarted: extend %v, release %v", ext, rel)
	// Master 1, the one that kept its counter, is frozen: the next grant
	// comes from masters 0 and 2.
	pauseMaster(t, rs, 1)
	other := addrClient(t, pipelinedPath, addrs)
	next, err := other.Acquire(ctx, "job", redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("holder's fence %d, next grant's %d", l.Fence(), next.Fence())
	if next.Fence() <= l.Fence() {
		t.Errorf("fence went backwards: %d after %d", next.Fence(), l.Fence())
	}
}

// Election terms go forward across a restart (without data) of each of two
// masters in turn while a leader holds, also when the first master to
// restart is the slowest to answer: the leader's watchdog heals it before
// the second restart, and a later leader elected by the two restarted
// masters (the third frozen) has a higher term.
func TestHeal_termGoesForwardAfterTwoRestartsWhileLeading(t *testing.T) {
	servers := redistest.Start(t, 3)
	addrs := []string{servers[0].Addr(), servers[1].Addr(), slowMaster(t, servers[2])}
	c := addrClient(t, pipelinedPath, addrs)
	ctx := ctxT(t)
	e, err := election.New(c, "svc", election.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // raise the term everywhere
		ld, err := e.Campaign(ctx, "warm-up")
		if err != nil {
			t.Fatal(err)
		}
		if err := ld.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rs := &realSet{servers: servers}
	if !redistest.WaitFor(ctx, func() bool { return count(rs.values(t, "svc"), "") == 3 }) {
		t.Fatal("not resigned everywhere")
	}
	ld, err := e.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	if !redistest.WaitFor(ctx, func() bool { return count(rs.values(t, "svc"), ld.Lock().Token()) == 3 }) {
		t.Fatalf("not on every master: %v", rs.values(t, "svc"))
	}
	if _, err := servers[2].Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	healed := redistest.Within(3*time.Second, func() bool { return rs.values(t, "svc")[2] == ld.Lock().Token() })
	t.Logf("master 2 healed within 3 s of watchdog extensions: %v", healed)
	if _, err := servers[0].Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	lost := redistest.Within(2*time.Second, func() bool { return ld.Err() != nil })
	t.Logf("after master 0 restarted: leadership lost %v (%v)", lost, ld.Err())
	_ = ld.Resign(ctx)
	pauseMaster(t, rs, 1)
	other := addrClient(t, pipelinedPath, addrs)
	e2, err := election.New(other, "svc", election.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	next, err := e2.Campaign(ctx, "host-b")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leader's term %d, next leader's %d", ld.Term(), next.Term())
	if next.Term() <= ld.Term() {
		t.Errorf("term went backwards: %d after %d", next.Term(), ld.Term())
	}
}
