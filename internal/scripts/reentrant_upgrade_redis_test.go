package scripts_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// The commands a client of the previous version sends for a reentrant
// hold: no hold id.
func oldAcquire(owner string, count int) []any {
	return []any{"re", "acquire", owner, 30000, count}
}

func oldRelease(owner string, count int) []any {
	return []any{"re", "release", owner, count, "ch", "rel-" + owner}
}

func oldRollback(owner string) []any { return []any{"re", "release", owner, 0, ""} }

func oldExtend(owner string) []any { return []any{"re", "extend", owner, 5000} }

// A client of the previous version (reentrant.lua without hold ids) and
// one of this version, on one key during a rolling upgrade: each one's
// hold keeps the other's owner out, neither one's release, rollback or
// extension touches the other's hold, each takes its own hold again, and
// the holder's last release leaves nothing. This version's script also
// serves a previous client's arguments as before; and an owner whose
// client is replaced by one of this version (a restarted process keeping
// its owner ID) is still the owner of a hold the previous one took.
func TestReentrant_previousVersionBesideThisOne(t *testing.T) {
	srv := redistest.StartOne(t)
	type step struct {
		old  bool // run by a client of the previous version
		args []any
		want int
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"previous version holds", []step{
			{true, oldAcquire("a", 1), 1},
			{false, reAcquire("b", "b:1", 1), 0},
			{false, reRelease("b", "b:1", 0), 0},
			{false, reRollback("b", "b:1"), 0},
			{false, reExtend("b", "b:1"), 0},
			{true, oldAcquire("a", 2), 1},
			{false, reAcquire("b", "b:2", 1), 0},
			{true, oldExtend("a"), 1},
			{true, oldRelease("a", 1), 1},
			{false, reAcquire("b", "b:3", 1), 0},
			{true, oldRelease("a", 0), 1},
			{false, reAcquire("b", "b:4", 1), 1},
			{false, reRelease("b", "b:4", 0), 1},
		}},
		{"this version holds", []step{
			{false, reAcquire("b", "b:1", 1), 1},
			{true, oldAcquire("a", 1), 0},
			{true, oldRelease("a", 0), 0},
			{true, oldRollback("a"), 0},
			{true, oldExtend("a"), 0},
			{false, reAcquire("b", "b:1", 2), 1},
			{true, oldAcquire("a", 1), 0},
			{false, reExtend("b", "b:1"), 1},
			{false, reRelease("b", "b:1", 1), 1},
			{true, oldAcquire("a", 1), 0},
			{false, reRelease("b", "b:1", 0), 1},
			{true, oldAcquire("a", 1), 1},
			{true, oldRelease("a", 0), 1},
		}},
		{"this version's script, previous arguments", []step{
			{false, oldAcquire("a", 1), 1},
			{false, reAcquire("b", "b:1", 1), 0},
			{false, oldAcquire("a", 2), 1},
			{false, oldExtend("a"), 1},
			{false, oldRelease("a", 1), 1},
			{false, oldRelease("a", 0), 1},
			{false, oldRollback("a"), 0},
		}},
		{"an owner's hold passed from the previous version to this one", []step{
			{true, oldAcquire("o", 1), 1},
			{false, reAcquire("o", "o:1", 2), 1},
			{false, reRelease("o", "o:2", 0), 0},
			{false, reRelease("o", "o:1", 1), 1},
			{true, oldAcquire("o", 2), 1},
			{false, reRelease("o", "o:1", 0), 1},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := conn(t, srv)
			if _, err := c.Do("DEL", "re"); err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				script, who := scripts.Reentrant, "this version"
				if s.old {
					script, who = scripts.PreviousReentrant, "the previous version"
				}
				if got := reentrantRun(t, c, script, s.args...); got != s.want {
					t.Fatalf("step %d, %s %v: %d, want %d", i+1, who, s.args, got, s.want)
				}
			}
			if n, _ := redis.Int(c.Do("EXISTS", "re")); n != 0 {
				t.Errorf("after the last release the lock is still there")
			}
		})
	}
}

// previousReentrant runs the previous version's reentrant.lua on every
// master, as a client of that version does; it returns each master's
// reply.
func previousReentrant(t *testing.T, servers []*redistest.Server, args ...any) []int {
	t.Helper()
	out := make([]int, len(servers))
	for i, s := range servers {
		c, err := redis.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		out[i], err = redis.Int(redigot.Do(scripts.PreviousReentrant, c, timeout, args...))
		c.Close()
		if err != nil {
			t.Fatalf("master %d: %v: %v", i, args, err)
		}
	}
	return out
}

// A Reentrant of this version and an owner of the previous version (its
// script run by hand on every master) on one key and three masters:
// whichever holds keeps the other out, Inspect by this version reads the
// hold (owner and count, not the hold id), and once the holder released,
// the other takes the key and nothing is left behind.
func TestReentrant_clientBesidePreviousVersionOwner(t *testing.T) {
	servers := redistest.Start(t, 3)
	ps := make([]pool.Pool, len(servers))
	for i, s := range servers {
		ps[i] = s.Pool()
	}
	c, err := redigo.New(ps, redlock.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	re, err := c.NewReentrant("re", "new", redlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	held := func(owner string, count int64) bool {
		in, err := c.Inspect(ctx, "re")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range in.Masters {
			if m.Err != nil || len(m.State.Holders) != 1 {
				return false
			}
			if h := m.State.Holders[0]; h.Token != owner || h.Count != count {
				return false
			}
		}
		return true
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		ctx2, cancel2 := context.WithTimeout(ctx, 5*time.Second)
		defer cancel2()
		if !redistest.WaitFor(ctx2, cond) {
			t.Fatalf("not on every master within 5 s: %s", what)
		}
	}

	t.Run("this version holds", func(t *testing.T) {
		for range 2 {
			if err := re.Acquire(ctx); err != nil {
				t.Fatal(err)
			}
		}
		wait("the hold of owner new, count 2", func() bool { return held("new", 2) })
		for i, r := range previousReentrant(t, servers, "re", "acquire", "old", 30000, 1) {
			if r != 0 {
				t.Fatalf("master %d granted the previous version's owner", i)
			}
		}
		previousReentrant(t, servers, "re", "release", "old", 0, "")
		if !held("new", 2) {
			t.Fatal("the previous version's refused attempt changed the hold")
		}
		for range 2 {
			if err := re.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		allKeysGone(t, servers)
	})

	t.Run("previous version holds", func(t *testing.T) {
		for i, r := range previousReentrant(t, servers, "re", "acquire", "old", 30000, 1) {
			if r != 1 {
				t.Fatalf("master %d refused the previous version's owner", i)
			}
		}
		if err := re.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("this version's owner on a held key: %v", err)
		}
		wait("the refused attempt rolled back", func() bool { return held("old", 1) })
		for i, r := range previousReentrant(t, servers, "re", "release", "old", 0, "") {
			if r != 1 {
				t.Errorf("master %d: the previous version's release: %d", i, r)
			}
		}
		if err := re.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		if err := re.Release(ctx); err != nil {
			t.Fatal(err)
		}
		allKeysGone(t, servers)
	})
}
