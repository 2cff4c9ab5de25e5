package redlock_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// Fencing against real masters.

func TestFence_strictlyIncreasesAcrossHolders(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, path connPath) {
		forEachN(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			clients := []*redlock.Client{rs.client(t, path), rs.client(t, path)}
			ctx := ctxT(t)
			var last uint64
			for i := 0; i < 40; i++ {
				opts := []redlock.LockOption{redlock.WithFencing()}
				if i%4 == 3 {
					opts = append(opts, redlock.WithFair()) // the fair script fences too
				}
				l, err := clients[i%2].Acquire(ctx, "k", opts...)
				if err != nil {
					t.Fatal(err)
				}
				if l.Fence() <= last {
					t.Fatalf("holder %d: token %d after %d", i, l.Fence(), last)
				}
				last = l.Fence()
				// Every master that granted holds the committed counter; a
				// quorum holds at least the token.
				atLeast := 0
				for _, s := range rs.servers {
					v, _ := redis.Uint64(s.Do("GET", layout.FenceKey("k")))
					if v >= last {
						atLeast++
					}
				}
				if atLeast < n/2+1 {
					t.Fatalf("holder %d: counter ≥ %d on %d masters, want a quorum", i, last, atLeast)
				}
				if i%3 == 0 {
					// Extending keeps the token.
					if err := l.Extend(ctx, 5*time.Second); err != nil || l.Fence() != last {
						t.Fatalf("extend: %v, token %d", err, l.Fence())
					}
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// The counter key has no TTL: it must outlive every lock.
			for i, s := range rs.servers {
				if ttl, _ := redis.Int64(s.Do("PTTL", layout.FenceKey("k"))); ttl != -1 {
					t.Errorf("master %d: counter PTTL %d, want -1 (none)", i, ttl)
				}
			}
		})
	})
}

func TestFence_concurrentHoldersNeverGoBackwards(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 5)
		ctx := ctxT(t)
		type grant struct {
			fence uint64
			at    time.Time
		}
		var mu sync.Mutex
		var grants []grant
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			c := rs.client(t, path)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 15; i++ {
					l, err := c.Acquire(ctx, "k", redlock.WithFencing(), redlock.WithTTL(5*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					// Under the lock: record the grant in order of grants.
					mu.Lock()
					grants = append(grants, grant{l.Fence(), time.Now()})
					mu.Unlock()
					if err := l.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		for i := 1; i < len(grants); i++ {
			if grants[i].fence <= grants[i-1].fence {
				t.Fatalf("grant %d has token %d after %d", i, grants[i].fence, grants[i-1].fence)
			}
		}
	})
}

func TestFence_survivesMinorityDownAndRestartsWithAOF(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		t.Parallel() // its own masters to kill; each call bounded by ctxT's seconds only
		rs := startReal(t, 5, redistest.WithAOF())
		c := rs.client(t, path)
		rng := rand.New(rand.NewPCG(1, 2))
		var last uint64
		var slowest time.Duration
		for i := 0; i < 30; i++ {
			// Between holders: up to two masters crash, some come back (with
			// their AOF), some stay down for the next holder.
			down := map[int]bool{}
			for _, m := range rng.Perm(5)[:rng.IntN(3)] {
				if err := rs.servers[m].Kill(); err != nil {
					t.Fatal(err)
				}
				down[m] = true
			}
			for m := range down {
				if rng.IntN(2) == 0 {
					if err := rs.servers[m].Start(); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Each holder's calls get a bound of their own: the masters'
			// restarts (each reads its AOF) take most of the test's time,
			// seconds in all on a loaded machine.
			ctx := ctxT(t)
			begin := time.Now()
			l, err := c.Acquire(ctx, "k", redlock.WithFencing(), redlock.WithTTL(5*time.Second))
			if err != nil {
				t.Fatalf("holder %d with masters %v crashed, after %v: %v", i, down, time.Since(begin), err)
			}
			slowest = max(slowest, time.Since(begin))
			if l.Fence() <= last {
				t.Fatalf("holder %d: token %d after %d", i, l.Fence(), last)
			}
			last = l.Fence()
			// Release may miss the masters that are down: they expire it.
			_ = l.Release(ctx)
			for m := range down {
				_ = rs.servers[m].Start() // an error means it is already up
			}
			waitUp(t, rs)
		}
		t.Logf("the slowest of 30 Acquires took %v", slowest)
	})
}

// waitUp waits until every master answers PING.
func waitUp(t *testing.T, rs *realSet) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, s := range rs.servers {
		if !redistest.WaitFor(ctx, func() bool { _, err := s.Do("PING"); return err == nil }) {
			t.Fatalf("master %d did not come back", i)
		}
	}
}

// Amnesia: masters that restart without persistence forget their
// counters, and a later holder's token can repeat an earlier one. This is
// the documented limit (docs/safety.md), shown here.
func TestFence_amnesiaCanRepeatTokens(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3) // no AOF
		ctx := ctxT(t)
		c := rs.client(t, path)
		var tokens []uint64
		for i := 0; i < 3; i++ {
			l, err := c.Acquire(ctx, "k", redlock.WithFencing())
			if err != nil {
				t.Fatal(err)
			}
			tokens = append(tokens, l.Fence())
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// A majority crashes and comes back empty; the one master that
		// remembers is slow (paused) while the next holder locks, so the two
		// amnesiac masters make the quorum on their own.
		for _, s := range rs.servers[:2] {
			if err := s.Restart(); err != nil {
				t.Fatal(err)
			}
		}
		waitUp(t, rs)
		if err := rs.servers[2].Pause(); err != nil {
			t.Fatal(err)
		}
		l, err := c.Acquire(ctx, "k", redlock.WithFencing())
		if rerr := rs.servers[2].Resume(); rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		if l.Fence() > tokens[len(tokens)-1] {
			t.Fatalf("token %d after %v: the amnesia did not show", l.Fence(), tokens)
		}
		t.Logf("after the amnesia the token went from %v back to %d", tokens, l.Fence())
	})
}

func TestFence_counterKeySharesTheSlot(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 1)
		c := rs.client(t, path)
		ctx := ctxT(t)
		// A cluster-enabled node (with no slots, so it only computes them).
		node := redistest.StartOne(t, redistest.WithConfig("cluster-enabled", "yes"))
		for _, key := range []string{"plain", "{user:1}:cart"} {
			l, err := c.Acquire(ctx, key, redlock.WithFencing())
			if err != nil {
				t.Fatal(err)
			}
			slot := func(k string) int64 {
				n, err := redis.Int64(node.Do("CLUSTER", "KEYSLOT", k))
				if err != nil {
					t.Fatalf("CLUSTER KEYSLOT: %v", err)
				}
				return n
			}
			if a, b := slot(key), slot(layout.FenceKey(key)); a != b {
				t.Errorf("%q in slot %d, its counter %q in %d", key, a, layout.FenceKey(key), b)
			}
			if v, _ := redis.String(rs.servers[0].Do("GET", layout.FenceKey(key))); v != strconv.FormatUint(l.Fence(), 10) {
				t.Errorf("counter %q, token %d", v, l.Fence())
			}
			_ = l.Release(ctx)
		}
	})
}
