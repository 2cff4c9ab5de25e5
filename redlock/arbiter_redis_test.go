package redlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// contend runs clients, each its own Client as separate processes would
// be, taking and releasing key cycles times each, and fails the test if
// two ever hold it at once or an acquisition fails. It returns how many
// acquisitions took more than one attempt.
func contend(t *testing.T, rs *realSet, clients, cycles int, key string) int {
	t.Helper()
	var holders, retried atomic.Int32
	var wg sync.WaitGroup
	for range clients {
		c := rs.client(t, pipelinedPath)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range cycles {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				l, err := c.Acquire(ctx, key, redlock.WithTTL(5*time.Second))
				if err != nil {
					cancel()
					t.Errorf("Acquire: %v", err)
					return
				}
				if h := holders.Add(1); h != 1 {
					t.Errorf("%d holders of %q at once", h, key)
				}
				if l.Attempts() > 1 {
					retried.Add(1)
				}
				time.Sleep(time.Millisecond)
				holders.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	return int(retried.Load())
}

// Several clients contending for one key, on five masters: every
// acquisition succeeds, never two holders at once, and the contended
// attempts (those after the first) happened.
func TestArbiter_contendedAcquisitionsStayExclusive(t *testing.T) {
	rs := startReal(t, 5)
	if retried := contend(t, rs, 4, 25, "arb"); retried == 0 {
		t.Log("no acquisition needed a second attempt: the arbiter was not exercised")
	}
}

// With the key's arbiter SIGSTOPped, contended acquisitions still
// succeed and stay exclusive: an attempt waits a quarter of the
// per-master timeout for the arbiter, then asks the others, and the next
// attempts pick the next master as arbiter.
func TestArbiter_stoppedArbiter(t *testing.T) {
	rs := startReal(t, 5)
	probe, c := rs.client(t, pipelinedPath), rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	// Contact every master first (identity), then stop the arbiter.
	for _, c := range []*redlock.Client{probe, c} {
		l, err := c.Acquire(ctx, "arb")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	arb := redlock.Arbiter(probe, "arb")
	if err := rs.servers[arb].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.servers[arb].Resume() })
	// Hold the key so that the contenders' attempts are contended.
	holder, err := probe.Acquire(ctx, "arb", redlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, "arb", redlock.WithTTL(5*time.Second))
		if err == nil {
			if l.Attempts() < 2 {
				err = errors.New("the first attempt won: no contended attempt was made")
			} else if a := redlock.Arbiter(c, "arb"); a == arb {
				err = errors.New("the stopped master is still the arbiter")
			}
			if rerr := l.Release(ctx); err == nil {
				err = rerr
			}
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // its contended attempts meet the stopped arbiter
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	contend(t, rs, 4, 10, "arb")
}

// While one client holds the key, the contenders' attempts after their
// first ask only the arbiter: the other masters see each contender's
// first SET (and at most its rollback) and nothing else.
func TestArbiter_losersTouchOnlyTheArbiter(t *testing.T) {
	rs := startReal(t, 5)
	holderC := rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	holder, err := holderC.Acquire(ctx, "arb", redlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	arb := redlock.Arbiter(holderC, "arb")
	const losers = 3
	cs := make([]*redlock.Client, losers)
	for i := range cs {
		cs[i] = rs.client(t, pipelinedPath)
		l, err := cs[i].TryAcquire(ctx, "warm-up") // first contact (identity), off the counts
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The warm-up releases' last legs run after Release returned: wait
	// until every master ran them, then count from zero.
	if !redistest.WaitFor(ctx, func() bool { return rs.exists(t, "warm-up") == 0 }) {
		t.Fatal("the warm-up lock stayed on some master")
	}
	for _, s := range rs.servers {
		if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Acquire(ctx, "arb", redlock.WithWait(400*time.Millisecond),
				redlock.WithBackoff(5*time.Millisecond, 20*time.Millisecond))
			var qe *redlock.QuorumError
			if !errors.As(err, &qe) {
				t.Errorf("Acquire: %v, want a QuorumError", err)
				return
			}
			if len(qe.NotAsked) != len(rs.servers)-1 || len(qe.Refused) != 1 || qe.Refused[0] != arb {
				t.Errorf("last attempt: %v; want refused by the arbiter %d alone", err, arb)
			}
		}()
	}
	wg.Wait()
	sets := cmdCalls(t, rs, arb, "set")
	if sets <= 2*losers {
		t.Errorf("the arbiter ran %d SETs; %d losers retrying for 400ms should send more", sets, losers)
	}
	for i := range rs.servers {
		if i == arb {
			continue
		}
		if n := cmdCalls(t, rs, i, "set"); n != losers {
			t.Errorf("master %d ran %d SETs, want %d (each loser's first attempt only)", i, n, losers)
		}
		// A first attempt, decided by three refusals, may roll back on
		// the masters it did not wait for (an ordered transport sends the
		// rollback behind the SET at once); a refused arbitrated attempt
		// sends nothing there.
		if n := cmdCalls(t, rs, i, "evalsha") + cmdCalls(t, rs, i, "eval"); n > losers {
			t.Errorf("master %d ran %d scripts (rollbacks), want at most %d (the first attempts')", i, n, losers)
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
