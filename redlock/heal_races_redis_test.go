package redlock_test

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// extendedTwice waits (within d) until l's validity has moved forward
// twice from what it was, so that its watchdog extended (and healed) at
// least twice.
func extendedTwice(t *testing.T, l *redlock.Lock, d time.Duration) {
	t.Helper()
	for n := 0; n < 2; n++ {
		from := l.Until()
		if !redistest.Within(d, func() bool { return l.Until().After(from) }) {
			t.Fatalf("the lock was not extended within %v (err %v)", d, l.Err())
		}
	}
}

// A master that lost the lock and was then taken by another holder (or
// given a key of another kind) keeps that holder's key through the heals
// of the lock's extensions, and its fencing counter is not raised by them.
func TestHeal_refusedOnAFlushedMasterWritesNoCounterOrMetadata(t *testing.T) {
	for _, other := range []string{"string", "hash"} {
		t.Run(other, func(t *testing.T) {
			rs := startReal(t, 3)
			c := rs.client(t, pipelinedPath)
			ctx := ctxT(t)
			l, err := c.Acquire(ctx, "job", redlock.WithTTL(1500*time.Millisecond), redlock.WithAutoExtend(0),
				redlock.WithFencing(), redlock.WithMetadata("a"))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			s := rs.servers[1]
			// The master loses everything, and another client's key is
			// there before the next extension.
			if other == "string" {
				_, err = s.Do("EVAL", `redis.call("FLUSHALL"); return redis.call("SET", KEYS[1], ARGV[1], "PX", 30000)`, 1, "job", "b-token")
			} else {
				_, err = s.Do("EVAL", `redis.call("FLUSHALL"); redis.call("HSET", KEYS[1], "f", "v"); return redis.call("PEXPIRE", KEYS[1], 30000)`, 1, "job")
			}
			if err != nil {
				t.Fatal(err)
			}
			extendedTwice(t, l, 3*time.Second)
			if other == "string" {
				if v, _ := redis.String(s.Do("GET", "job")); v != "b-token" {
					t.Errorf("the other holder's key was replaced by %q", v)
				}
			} else if typ, _ := redis.String(s.Do("TYPE", "job")); typ != "hash" {
				t.Errorf("the key of another kind became a %s", typ)
			}
			for _, k := range []string{layout.FenceKey("job"), layout.MetaKey("job")} {
				if n, _ := redis.Int(s.Do("EXISTS", k)); n != 0 {
					t.Errorf("a refused heal wrote %s", k)
				}
			}
			if err := l.Err(); err != nil {
				t.Fatalf("the lock was lost: %v", err)
			}
		})
	}
}

// A heal that reaches a frozen master late — the master lost the lock, was
// frozen while the extension's heal was in flight, and thawed after the
// lock was released, another client acquired it and the first lock's
// validity ended — never gives the key to two holders: the late copy is on
// that one master only (a minority), the later holder stays valid and
// extends, its fence is above the first's, and the late copy, if any, is
// gone within the lock's TTL of the thaw.
func TestHeal_lateOnAFrozenMasterLeavesNoSecondHolder(t *testing.T) {
	redistest.SkipShort(t)
	const ttl = time.Second
	rs := startReal(t, 5)
	a, b := rs.client(t, pipelinedPath), rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	l, err := a.Acquire(ctx, "job", redlock.WithTTL(ttl), redlock.WithFencing(), redlock.WithMetadata("a"))
	if err != nil {
		t.Fatal(err)
	}
	// Masters 3 and 4 lose the lock; 4 freezes before the extension, so
	// its extension and heal wait in its buffers while 3's No makes the
	// extension heal.
	for _, i := range []int{3, 4} {
		if _, err := rs.servers[i].Do("FLUSHALL"); err != nil {
			t.Fatal(err)
		}
	}
	sets := rs.servers[4].Calls("set")
	resume := pauseMaster(t, rs, 4)
	// Extended until master 3's No came in time to heal (it races the
	// others' Yes).
	healed := func() bool {
		v, _ := redis.String(rs.servers[3].Do("GET", "job"))
		return v == l.Token()
	}
	for i := 0; !healed(); i++ {
		if i == 50 {
			t.Fatal("master 3 was not healed after 50 extensions")
		}
		if err := l.Extend(ctx, ttl); err != nil {
			t.Fatal(err)
		}
		redistest.Within(50*time.Millisecond, healed)
	}
	until := l.Until() // Release moves it back
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := b.Acquire(ctx, "job", redlock.WithTTL(30*time.Second), redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if l2.Fence() <= l.Fence() {
		t.Errorf("fence %d after %d", l2.Fence(), l.Fence())
	}
	// Thaw after the first lock's validity ended.
	if !redistest.Within(5*time.Second, func() bool { return time.Now().After(until.Add(200 * time.Millisecond)) }) {
		t.Fatal("clock")
	}
	resume()
	thawed := time.Now()
	// The heal's SET (NX, refused or not) ran once the master read its
	// buffers.
	if !redistest.Within(2*time.Second, func() bool { return rs.servers[4].Calls("set") > sets }) {
		t.Fatal("nothing ran on master 4 after the thaw")
	}
	held, _ := redis.String(rs.servers[4].Do("GET", "job"))
	pttl, _ := redis.Int(rs.servers[4].Do("PTTL", "job"))
	who := map[string]string{"": "nothing", l.Token(): "the released lock", l2.Token(): "the second holder"}[held]
	t.Logf("master 4 after the thaw: %s (%q), PTTL %d ms", who, held, pttl)
	if held == l.Token() && time.Duration(pttl)*time.Millisecond > ttl {
		t.Errorf("the late copy outlives the TTL it was sent with: PTTL %d ms", pttl)
	}
	if vals := rs.values(t, "job"); count(vals, l.Token()) > 1 {
		t.Errorf("the released lock's token is on %d masters: %v", count(vals, l.Token()), vals)
	}
	if err := l2.Extend(ctx, 30*time.Second); err != nil {
		t.Errorf("the second holder could not extend: %v", err)
	}
	if err := l2.Err(); err != nil {
		t.Errorf("the second holder was lost: %v", err)
	}
	if !redistest.Within(ttl+time.Second, func() bool {
		v, _ := redis.String(rs.servers[4].Do("GET", "job"))
		return v != l.Token()
	}) {
		t.Errorf("the late copy is still on master 4 %v after the thaw", time.Since(thawed))
	}
}

// A fair lock is healed on a flushed master (which lost the queue with
// it) while a fair waiter waits; the waiter gets the lock once the holder
// releases, the healed copy released with the rest.
func TestHeal_fairLockHealedWhileAWaiterQueues(t *testing.T) {
	rs := startReal(t, 3)
	a, b := rs.client(t, pipelinedPath), rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	l, err := a.Acquire(ctx, "job", redlock.WithTTL(1500*time.Millisecond), redlock.WithAutoExtend(0), redlock.WithFair())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *redlock.Lock, 1)
	go func() {
		l2, err := b.Acquire(ctx, "job", redlock.WithTTL(5*time.Second), redlock.WithFair())
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	if _, err := rs.servers[1].Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if !redistest.Within(5*time.Second, func() bool { return rs.values(t, "job")[1] == l.Token() }) {
		t.Fatalf("not healed: %v", rs.values(t, "job"))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	l2 := <-got
	if l2 == nil {
		return
	}
	defer l2.Release(ctx)
	t.Logf("the waiter got the lock %v after the release", time.Since(released).Round(time.Millisecond))
	if !redistest.Within(time.Second, func() bool { return count(rs.values(t, "job"), l.Token()) == 0 }) {
		t.Errorf("the released token is still on %v", rs.values(t, "job"))
	}
}
