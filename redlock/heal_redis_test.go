package redlock_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// healedOn reports whether every master holds the lock's token with the
// fencing counter at least its fence and, when meta is set, the metadata
// (and, for an election, its term) beside it.
func healedOn(rs *realSet, l *redlock.Lock, meta string, election bool) error {
	for i, s := range rs.servers {
		v, _ := redis.String(s.Do("GET", l.Key()))
		if v != l.Token() {
			return fmt.Errorf("master %d holds %q", i, v)
		}
		if l.Fence() > 0 {
			n, _ := redis.Uint64(s.Do("GET", layout.FenceKey(l.Key())))
			if n < l.Fence() {
				return fmt.Errorf("master %d: fencing counter %d below the lock's %d", i, n, l.Fence())
			}
		}
		if meta != "" {
			m, _ := redis.String(s.Do("HGET", layout.MetaKey(l.Key()), l.Token()))
			if m != meta {
				return fmt.Errorf("master %d: metadata %q", i, m)
			}
		}
		if election {
			term, _ := redis.String(s.Do("HGET", layout.MetaKey(l.Key()), keys.TermField(l.Token())))
			if term != strconv.FormatUint(l.Fence(), 10) {
				return fmt.Errorf("master %d: term %q, want %d", i, term, l.Fence())
			}
		}
	}
	return nil
}

// extendUntil extends l by ttl until cond holds, for up to ten
// extensions a second apart. An extension returns at a quorum and heals
// the masters that answered by then; a master that lost the lock and
// answered later is healed by the next extension.
func extendUntil(t *testing.T, ctx context.Context, l *redlock.Lock, ttl time.Duration, cond func() bool) bool {
	t.Helper()
	for range 10 {
		if err := l.Extend(ctx, ttl); err != nil {
			t.Fatal(err)
		}
		if redistest.Within(time.Second, cond) {
			return true
		}
	}
	return false
}

// restartEachInTurn waits for the lock on every master (the acquisition
// returned at a quorum: a fenced one's commit may still be on its way to
// the last master), then restarts every master in turn and waits, after
// each, for the lock to be back on every master.
func restartEachInTurn(t *testing.T, rs *realSet, l *redlock.Lock, meta string, election bool) {
	t.Helper()
	var first error
	if !redistest.WaitFor(ctxT(t), func() bool { first = healedOn(rs, l, meta, election); return first == nil }) {
		t.Fatalf("before the restarts: %v", first)
	}
	for i, s := range rs.servers {
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var last error
		restarted := time.Now()
		back := redistest.WaitFor(ctx, func() bool { last = healedOn(rs, l, meta, election); return last == nil })
		cancel()
		if !back {
			t.Fatalf("after master %d restarted: %v (the lock's state: %v)", i, last, l.Err())
		}
		t.Logf("master %d: the lock back on every master %v after its restart", i, time.Since(restarted).Round(time.Millisecond))
		if err := l.Err(); err != nil {
			t.Fatalf("the lock was lost after master %d restarted: %v", i, err)
		}
	}
}

// An auto-extended lock held while each master restarts in turn is back on
// every master after each restart, with its fencing counter and metadata;
// a later holder's fence is above it, though every master restarted.
func TestHeal_autoExtendedLockAfterEachMasterRestarts(t *testing.T) {
	redistest.SkipShort(t)
	for _, aof := range []bool{false, true} {
		t.Run(fmt.Sprintf("aof=%v", aof), func(t *testing.T) {
			var opts []redistest.Option
			if aof {
				opts = append(opts, redistest.WithAOF())
			}
			rs := startReal(t, 3, opts...)
			c := rs.client(t, pipelinedPath)
			ctx := ctxT(t)
			// A TTL of a few seconds: a busy machine may delay an
			// extension by a good part of a second.
			l, err := c.Acquire(ctx, "job", redlock.WithTTL(3*time.Second), redlock.WithAutoExtend(0),
				redlock.WithFencing(), redlock.WithMetadata("worker-1"))
			if err != nil {
				t.Fatal(err)
			}
			restartEachInTurn(t, rs, l, "worker-1", false)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			next, err := c.Acquire(ctx, "job", redlock.WithFencing())
			if err != nil {
				t.Fatal(err)
			}
			defer next.Release(ctx)
			if next.Fence() <= l.Fence() {
				t.Errorf("fence went backwards: %d after %d", next.Fence(), l.Fence())
			}
		})
	}
}

// The same under an election: the leader's key, term and value are back
// on every master after each restart, and Leader reads it.
func TestHeal_electionAfterEachMasterRestarts(t *testing.T) {
	redistest.SkipShort(t)
	rs := startReal(t, 3)
	c := rs.client(t, pooledPath)
	ctx := ctxT(t)
	e, err := election.New(c, "svc", election.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ld, err := e.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	restartEachInTurn(t, rs, ld.Lock(), "host-a", true)
	got, err := e.Leader(ctx)
	if err != nil || got.Value != "host-a" || got.Term != ld.Term() {
		t.Errorf("Leader = %+v, %v; want host-a, term %d", got, err, ld.Term())
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := e.Campaign(ctx, "host-b")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Resign(ctx)
	if next.Term() <= ld.Term() {
		t.Errorf("term went backwards: %d after %d", next.Term(), ld.Term())
	}
}

// A master that holds another token where the lock was lost is never
// overwritten: the lock stays off it.
func TestHeal_neverOverwritesAnotherHolder(t *testing.T) {
	rs := startReal(t, 5)
	c := rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "job", redlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !redistest.WaitFor(ctx, func() bool { return count(rs.values(t, "job"), l.Token()) == 5 }) {
		t.Fatal("not on every master")
	}
	if _, err := rs.servers[2].Do("SET", "job", "someone-else", "PX", 60000); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.servers[1].Do("DEL", "job"); err != nil {
		t.Fatal(err)
	}
	if !extendUntil(t, ctx, l, 2*time.Second, func() bool { return rs.values(t, "job")[1] == l.Token() }) {
		t.Errorf("not put back on the flushed master: %v", rs.values(t, "job"))
	}
	if v := rs.values(t, "job")[2]; v != "someone-else" {
		t.Errorf("another holder's key was overwritten: %q", v)
	}
	pttl, _ := redis.Int(rs.servers[1].Do("PTTL", "job"))
	if pttl <= 0 || pttl > 2000 {
		t.Errorf("healed copy's PTTL %d, want within the validity left", pttl)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The minimal ACL of docs/operations.md is enough to heal a lock (fenced)
// and to release one before its minimum hold.
func TestHeal_minimalACLIsEnoughToHealAndHoldAMinimum(t *testing.T) {
	servers := redistest.Start(t, 3)
	c := addrClient(t, pipelinedPath, aclUser(t, servers, "locker", minimalACL))
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "lock:h", redlock.WithFencing(), redlock.WithMinHold(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	rs := &realSet{servers: servers}
	if !redistest.WaitFor(ctx, func() bool { return count(rs.values(t, "lock:h"), l.Token()) == 3 }) {
		t.Fatal("not on every master")
	}
	if _, err := servers[0].Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if !extendUntil(t, ctx, l, 5*time.Second, func() bool { return healedOn(rs, l, "", false) == nil }) {
		t.Fatalf("not healed: %v", healedOn(rs, l, "", false))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v := rs.values(t, "lock:h"); count(v, l.Token()) < 2 {
		t.Errorf("the minimum hold left %v", v)
	}
}
