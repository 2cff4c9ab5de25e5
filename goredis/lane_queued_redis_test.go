package goredis

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/adaptertest"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// slowSetLane returns a lane to a master behind a proxy that holds every
// SET for delay (adaptertest.SlowSetProxies): a master that is slow, not
// down. Its connection is made (a PING answered).
func slowSetLane(t *testing.T, delay time.Duration) *lane {
	t.Helper()
	addr := adaptertest.SlowSetProxies(t, []string{startServer(t).addr}, delay)[0]
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	t.Cleanup(func() { c.Close() })
	l := newTestLane(t, c)
	r, ch := cmd(5*time.Second, "PING")
	l.send(r)
	if res := wait(t, ch); res.err != nil {
		t.Fatalf("PING: %+v", res)
	}
	return l
}

// A command queued behind a batch that a slow master answers late, and
// queued while that batch had been silent for less than the command's
// wait, is sent when the batch returns and its reply delivered, late: the
// master is slow, not down, and a late answer is how the Client learns
// that the host is slow (its adaptive bound). It used to fail at its
// deadline, unsent, while it waited in the queue.
func TestLane_queuedBehindASlowMasterIsSentLate(t *testing.T) {
	l := slowSetLane(t, 200*time.Millisecond)
	first, firstCh := cmd(5*time.Second, "SET", "first", "1", "PX", 10000)
	l.send(first)
	taken(t, l, first, true)
	start := time.Now()
	const budget = 80 * time.Millisecond
	queued, queuedCh := cmd(budget, "SET", "queued", "1", "PX", 10000)
	queued.grace = 50 * time.Millisecond
	l.send(queued)
	if s := l.silence(); s >= budget {
		t.Skipf("the batch ahead was silent for %v when the command was queued: the machine is too loaded to tell", s)
	}
	if res := wait(t, firstCh); res.err != nil || res.v != "OK" {
		t.Fatalf("the first SET: %+v, want OK", res)
	}
	res := wait(t, queuedCh)
	if res.err != nil || res.v != "OK" || !res.sent {
		t.Fatalf("a command queued behind a slow master's batch, %v after its queueing: %+v, want OK, sent late", time.Since(start), res)
	}
	if el := time.Since(start); el < budget {
		t.Fatalf("answered after %v, within its deadline: the case this test checks did not occur", el)
	}
}

// A command queued behind a batch that has been silent for longer than
// the command's wait (and its grace) is queued behind a master taken for
// hung: it gets one grace past its deadline, not the lane's late bound,
// and fails unsent, as a timeout.
func TestLane_queuedBehindAHungMasterGetsItsGrace(t *testing.T) {
	s, l := connectedLane(t)
	s.stop()
	defer s.cont()
	first, _ := cmd(5*time.Second, "SET", "first", "1", "PX", 10000)
	l.send(first)
	taken(t, l, first, true)
	const budget, grace = 50 * time.Millisecond, 50 * time.Millisecond
	if !redistest.Within(5*time.Second, func() bool { return l.silence() > 3*budget }) {
		t.Fatal("the batch was never silent for longer than the command's wait")
	}
	start := time.Now()
	queued, queuedCh := cmd(budget, "SET", "queued", "1", "PX", 10000)
	queued.grace = grace
	l.send(queued)
	res := wait(t, queuedCh)
	el := time.Since(start)
	if !errors.Is(res.err, errTimeout) || res.sent {
		t.Fatalf("a command queued behind a hung master: %+v, want a timeout, unsent", res)
	}
	if el >= lateBound(budget) {
		t.Fatalf("failed after %v: waited the late bound (%v), not its grace (%v)", el, lateBound(budget), grace)
	}
}

// A command that undoes one queued ahead of it (a rollback behind its
// SET), or that is not worthless late (a release behind an extension), is
// sent after it, also when that command is kept past its deadline (the
// master was slow, not hung, when it was queued) and the later one was
// queued once the batch ahead had been silent for longer than its own
// wait: failed first, unsent, it left the command ahead to run on its
// own, late, and its grant on the master.
func TestLane_undoBehindAKeptCommandIsSentAfterIt(t *testing.T) {
	for _, undo := range []bool{true, false} {
		name := map[bool]string{true: "rollback", false: "release"}[undo]
		t.Run(name, func(t *testing.T) {
			l := slowSetLane(t, 400*time.Millisecond)
			first, firstCh := cmd(5*time.Second, "SET", "first", "1", "PX", 10000)
			l.send(first)
			taken(t, l, first, true)
			const budget = 80 * time.Millisecond
			set, setCh := cmd(budget, "SET", "undo:k", "tok", "NX", "PX", 30000)
			set.grace, set.dropWhenDown = 50*time.Millisecond, true
			l.send(set)
			if s := l.silence(); s >= budget {
				t.Skipf("the batch ahead was silent for %v when the SET was queued: the machine is too loaded to tell", s)
			}
			if !poll(2*time.Second, func() bool { return l.silence() > 150*time.Millisecond }) {
				t.Fatal("the batch ahead was never silent for 150 ms")
			}
			after, afterCh := cmd(30*time.Millisecond, "DEL", "undo:k")
			after.grace, after.undo = 30*time.Millisecond, undo
			l.send(after)
			if res := wait(t, firstCh); res.err != nil {
				t.Fatalf("the first SET: %+v", res)
			}
			s, u := wait(t, setCh), wait(t, afterCh)
			if s.err != nil || !s.sent {
				t.Skipf("the SET was not sent late (%+v): the case this test checks did not occur", s)
			}
			if u.err != nil || !u.sent || u.v != int64(1) {
				t.Errorf("the %s queued behind a SET sent late: %+v, want sent after it, deleting its key", name, u)
			}
		})
	}
}
