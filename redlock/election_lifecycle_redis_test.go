package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// Resign twice, and Resign after the leadership was lost: both say
// ErrNotHeld, and a lost leader's Resign takes nothing from its successor.
func TestElection_resignTwiceAndAfterLoss(t *testing.T) {
	rs := startReal(t, 3)
	c := rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	e := newElection(t, c, "el", redlock.WithTTL(time.Second))
	ld, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ld.Resign(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("second Resign: %v", err)
	}
	ld2, err := e.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	// Depose b behind its back: every master drops its key.
	for _, s := range rs.servers {
		if _, err := s.Do("DEL", "el"); err != nil {
			t.Fatal(err)
		}
	}
	ld3, err := newElection(t, rs.client(t, pipelinedPath), "el", redlock.WithTTL(time.Second)).Campaign(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ld2.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("the deposed leader did not learn of it")
	}
	if err := ld2.Resign(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("Resign after loss: %v", err)
	}
	got, err := e.Leader(ctx)
	if err != nil || got.Value != "c" || got.Term != ld3.Term() || ld3.Term() <= ld2.Term() {
		t.Fatalf("Leader = %+v, %v; c's term %d, b's %d", got, err, ld3.Term(), ld2.Term())
	}
	if err := ld3.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A campaign whose ctx ends while it waits (fair and not) leaves nothing on
// any master but the fencing counter: no queue entry, no metadata.
func TestElection_campaignCancelledLeavesNothing(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "fair"}[fair], func(t *testing.T) {
			rs := startReal(t, 3)
			ctx := ctxT(t)
			opts := []redlock.LockOption{redlock.WithTTL(2 * time.Second)}
			if fair {
				opts = append(opts, redlock.WithFair())
			}
			leader, err := newElection(t, rs.client(t, pipelinedPath), "el", opts...).Campaign(ctx, "leader")
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for i := range 4 {
				e := newElection(t, rs.client(t, pipelinedPath), "el", opts...)
				wg.Add(1)
				go func() {
					defer wg.Done()
					cctx, cancel := context.WithTimeout(ctx, time.Duration(300+100*i)*time.Millisecond)
					defer cancel()
					if ld, err := e.Campaign(cctx, "waiter"); err == nil {
						t.Errorf("a second leader: %v", ld.Value())
					} else if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("err = %v", err)
					}
				}()
			}
			wg.Wait()
			if err := leader.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			leftover.None(t, rs.servers) // only the fencing counter stays
		})
	}
}

// Any bytes are metadata: NUL, invalid UTF-8, the maximum length; Inspect
// and Leader give them back exactly; "" stores no hash at all.
func TestMetadata_binaryAndEmpty(t *testing.T) {
	rs := startReal(t, 3)
	c := rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	long := make([]byte, layout.MaxMeta)
	for i := range long {
		long[i] = byte(i)
	}
	for _, v := range []string{"\x00", "a\x00b\xff\xfe\r\n", string(long)} {
		e := newElection(t, c, "bin")
		ld, err := e.Campaign(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "metadata on every master", func() bool { return all(inspectMeta(t, c, "bin", ld.Lock().Token()), v) })
		got, err := e.Leader(ctx)
		if err != nil || got.Value != v {
			t.Fatalf("Leader = %q, %v", got.Value, err)
		}
		if err := ld.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l, err := c.Acquire(ctx, "empty", redlock.WithMetadata(""))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range rs.servers {
		if ex, _ := redis.Int(s.Do("EXISTS", layout.MetaKey("empty"))); ex != 0 {
			t.Fatalf("master %d has a metadata hash for empty metadata", i)
		}
	}
	_ = l.Release(ctx)
}

// Someone else's value of another type at the metadata key: the
// acquisition fails there with a clear error, and nothing of the lock is
// left on that master (the script's SET is not undone by its later error).
func TestMetadata_foreignTypeAtMetaKeyLeavesNothing(t *testing.T) {
	forEachN(t, func(t *testing.T, n int) {
		rs := startReal(t, n)
		c := rs.client(t, pipelinedPath)
		ctx := ctxT(t)
		if _, err := rs.servers[0].Do("SET", layout.MetaKey("k"), "not a hash"); err != nil {
			t.Fatal(err)
		}
		l, err := c.TryAcquire(ctx, "k", redlock.WithMetadata("me"))
		if n == 1 && err == nil {
			t.Fatal("acquired though the metadata could not be stored")
		}
		t.Logf("N=%d: %v", n, err)
		if l != nil {
			if err := l.Release(ctx); err != nil {
				t.Logf("release: %v", err)
			}
		}
		// The release returns at a quorum: at N=5 the last master's may
		// still be on its way. A key left by the attempt lives its TTL
		// (10 s by default), past the 3 s wait.
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		redistest.WaitFor(wctx, func() bool { return count(rs.values(t, "k"), "") == n })
		for i, v := range rs.values(t, "k") {
			if v != "" {
				t.Errorf("master %d keeps the lock key after the attempt: %q", i, v)
			}
		}
	})
}

// A leader whose extensions fail on a majority (two of three masters
// paused) learns of it before anyone else can be elected: its Lost is
// closed before the next candidate wins, whose term is higher.
func TestElection_majorityPausedLeaderLosesFirst(t *testing.T) {
	rs := startReal(t, 3)
	ctx := ctxT(t)
	const ttl = time.Second
	a, err := newElection(t, rs.client(t, pipelinedPath), "el", redlock.WithTTL(ttl)).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan *redlock.Leadership, 1)
	e := newElection(t, rs.client(t, pipelinedPath), "el", redlock.WithTTL(ttl))
	go func() {
		ld, err := e.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		won <- ld
	}()
	for _, s := range rs.servers[1:] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	var lostAt time.Time
	select {
	case <-a.Lost():
		lostAt = time.Now()
	case <-time.After(3 * ttl):
		t.Fatal("the leader did not learn it lost the majority")
	}
	time.Sleep(ttl) // the subject: a TTL passes with the majority paused
	for _, s := range rs.servers[1:] {
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	b := <-won
	if b == nil {
		t.FailNow()
	}
	if time.Now().Before(lostAt) || b.Term() <= a.Term() || a.Err() == nil {
		t.Fatalf("b (term %d) after a (term %d, err %v)", b.Term(), a.Term(), a.Err())
	}
	if err := a.Resign(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("the lost leader's Resign: %v", err)
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// Terms keep growing after every master crashed and came back with its
// AOF, whether the leader had resigned before or held on through it.
func TestElection_termGrowsAcrossAOFRestartOfAll(t *testing.T) {
	t.Parallel()
	rs := startReal(t, 3, redistest.WithAOF())
	ctx := ctxT(t)
	c := rs.client(t, pipelinedPath)
	e := newElection(t, c, "el", redlock.WithTTL(time.Second))
	restartAll := func() {
		for _, s := range rs.servers {
			if err := s.Restart(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var last uint64
	for i := range 3 {
		ld, err := e.Campaign(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if ld.Term() <= last {
			t.Fatalf("round %d: term %d after %d", i, ld.Term(), last)
		}
		last = ld.Term()
		if i%2 == 0 {
			if err := ld.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			restartAll()
		} else {
			restartAll() // held through it: the key comes back, then expires or is lost
			select {
			case <-ld.Lost():
			case <-time.After(5 * time.Second):
				_ = ld.Resign(ctx)
			}
		}
	}
}

// An attempt of every kind with metadata that is granted by one master and
// refused by the other two (which another client holds) is rolled back:
// the granting master keeps neither the lock nor its metadata (only a
// fencing counter).
func TestMetadata_goneAfterRollbackEveryKind(t *testing.T) {
	ctx := ctxT(t)
	opts := func(more ...redlock.LockOption) []redlock.LockOption {
		return append([]redlock.LockOption{redlock.WithTTL(10 * time.Second), redlock.WithMetadata("loser")}, more...)
	}
	type attempt func(c *redlock.Client, key string) error
	plainBlock := func(c *redlock.Client, key string) error { _, err := c.TryAcquire(ctx, key); return err }
	kinds := []struct {
		name         string
		block, other attempt
	}{
		{"plain", plainBlock, func(c *redlock.Client, key string) error { _, err := c.TryAcquire(ctx, key, opts()...); return err }},
		{"fenced fair", plainBlock, func(c *redlock.Client, key string) error {
			_, err := c.TryAcquire(ctx, key, opts(redlock.WithFencing(), redlock.WithFair())...)
			return err
		}},
		{"read", func(c *redlock.Client, key string) error { _, err := c.TryAcquireWrite(ctx, key); return err },
			func(c *redlock.Client, key string) error { _, err := c.TryAcquireRead(ctx, key, opts()...); return err }},
		{"write", func(c *redlock.Client, key string) error { _, err := c.TryAcquireRead(ctx, key); return err },
			func(c *redlock.Client, key string) error {
				_, err := c.TryAcquireWrite(ctx, key, opts()...)
				return err
			}},
		{"multi", func(c *redlock.Client, key string) error { _, err := c.TryAcquire(ctx, key+"-b"); return err },
			func(c *redlock.Client, key string) error {
				_, err := c.TryAcquireMulti(ctx, []string{key, key + "-b"}, opts()...)
				return err
			}},
		{"reentrant", func(c *redlock.Client, key string) error {
			r, err := c.NewReentrant(key, "blocker")
			if err != nil {
				return err
			}
			return r.TryAcquire(ctx)
		}, func(c *redlock.Client, key string) error {
			r, err := c.NewReentrant(key, "loser", opts()...)
			if err != nil {
				return err
			}
			return r.TryAcquire(ctx)
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			rs := startReal(t, 3)
			blocker, err := redigo.New(rs.pools[1:], redlock.WithTimeout(realTimeout))
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Close()
			if err := k.block(blocker, "k"); err != nil {
				t.Fatal(err)
			}
			if err := k.other(rs.client(t, pipelinedPath), "k"); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("err = %v", err)
			}
			leftover.None(t, rs.servers[:1]) // the first master keeps nothing
		})
	}
}

// WithWait has no place in an election (a campaign waits until its ctx
// ends): WithWait(0) would make Campaign retry without any pause, and a
// fair candidate's bounded Acquire would leave its place in the queue at
// each bound. NewElection refuses it, naming it.
func TestElection_newElectionRefusesWithWait(t *testing.T) {
	rs := startReal(t, 1)
	c := rs.client(t, pipelinedPath)
	for _, d := range []time.Duration{0, time.Second} {
		if _, err := c.NewElection("el", redlock.WithWait(d)); !errors.Is(err, redlock.ErrInvalid) || !strings.Contains(err.Error(), "WithWait") {
			t.Fatalf("WithWait(%v): %v", d, err)
		}
	}
}

// A fair election names its leader as a plain one does, candidates are
// elected in the order they came, and WithMaxHold ends a term: the leader
// learns it (ErrMaxHold) and the next candidate takes over with a higher
// term.
func TestElection_fairOrderAndMaxHold(t *testing.T) {
	rs := startReal(t, 3)
	ctx := ctxT(t)
	opts := []redlock.LockOption{redlock.WithFair(), redlock.WithTTL(time.Second), redlock.WithMaxHold(1500 * time.Millisecond)}
	a, err := newElection(t, rs.client(t, pipelinedPath), "fair", opts...).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	watcher := newElection(t, rs.client(t, pipelinedPath), "fair")
	if got, err := watcher.Leader(ctx); err != nil || got.Value != "a" || got.Term != a.Term() {
		t.Fatalf("Leader = %+v, %v", got, err)
	}
	won := make(chan *redlock.Leadership, 2)
	queued := func(i int) int {
		k, _ := redis.Int(rs.servers[i].Do("ZCARD", layout.QueueKey("fair")))
		return k
	}
	base := make([]int, len(rs.servers))
	for i := range rs.servers {
		base[i] = queued(i)
	}
	for n, v := range []string{"b", "c"} {
		e := newElection(t, rs.client(t, pipelinedPath), "fair", opts...)
		go func() {
			ld, err := e.Campaign(ctx, v)
			if err != nil {
				t.Error(err)
			}
			won <- ld
		}()
		// b queues before c: its entry in the fair queue on a quorum
		redistest.Eventually(t, 10*time.Second, v+" queued", func() bool {
			in := 0
			for i := range rs.servers {
				if queued(i) >= base[i]+n+1 {
					in++
				}
			}
			return in >= 2
		})
	}
	select {
	case <-a.Lost():
		if !errors.Is(a.Err(), redlock.ErrMaxHold) {
			t.Fatalf("a lost: %v", a.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WithMaxHold did not end the term")
	}
	b := <-won
	if b == nil || b.Value() != "b" || b.Term() <= a.Term() {
		t.Fatalf("after a (term %d): %v", a.Term(), b)
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	c := <-won
	if c == nil || c.Value() != "c" || c.Term() <= b.Term() {
		t.Fatalf("after b (term %d): %v", b.Term(), c)
	}
	_ = c.Resign(ctx)
}
