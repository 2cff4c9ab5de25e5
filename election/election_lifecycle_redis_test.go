package election_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// Resign twice, and Resign after the leadership was lost: both say
// ErrNotHeld, and a lost leader's Resign takes nothing from its successor.
func TestElection_resignTwiceAndAfterLoss(t *testing.T) {
	rs := startReal(t, 3)
	c := rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	e := newElection(t, c, "el", election.WithTTL(time.Second))
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
	ld3, err := newElection(t, rs.client(t, pipelinedPath), "el", election.WithTTL(time.Second)).Campaign(ctx, "c")
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
			opts := []election.Option{election.WithTTL(2 * time.Second)}
			if fair {
				opts = append(opts, election.WithFair())
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

// A leader whose extensions fail on a majority (two of three masters
// paused) learns of it before anyone else can be elected: its Lost is
// closed before the next candidate wins, whose term is higher.
func TestElection_majorityPausedLeaderLosesFirst(t *testing.T) {
	rs := startReal(t, 3)
	ctx := ctxT(t)
	const ttl = time.Second
	a, err := newElection(t, rs.client(t, pipelinedPath), "el", election.WithTTL(ttl)).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan *election.Leadership, 1)
	e := newElection(t, rs.client(t, pipelinedPath), "el", election.WithTTL(ttl))
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
	e := newElection(t, c, "el", election.WithTTL(time.Second))
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

// A fair election names its leader as a plain one does, candidates are
// elected in the order they came, and WithMaxHold ends a term: the leader
// learns it (ErrMaxHold) and the next candidate takes over with a higher
// term.
func TestElection_fairOrderAndMaxHold(t *testing.T) {
	rs := startReal(t, 3)
	ctx := ctxT(t)
	opts := []election.Option{election.WithFair(), election.WithTTL(time.Second), election.WithMaxHold(1500 * time.Millisecond)}
	a, err := newElection(t, rs.client(t, pipelinedPath), "fair", opts...).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	watcher := newElection(t, rs.client(t, pipelinedPath), "fair")
	if got, err := watcher.Leader(ctx); err != nil || got.Value != "a" || got.Term != a.Term() {
		t.Fatalf("Leader = %+v, %v", got, err)
	}
	won := make(chan *election.Leadership, 2)
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
