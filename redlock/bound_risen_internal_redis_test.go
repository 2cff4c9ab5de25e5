package redlock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/stall"
)

// risingClient is a Client on the masters reals, each behind a proxy that
// holds every SET for delay; as each SET reaches its proxy, the Client
// notes for every master an answer that took slow, read now: as the late
// answers of other rounds, read while this one waits, would raise the
// adaptive bound. The Client has identified its masters (their INFO is
// not held: the bound starts at the timeout).
func risingClient(t *testing.T, reals []*redistest.Server, pipelined bool, delay, slow time.Duration) *Client {
	t.Helper()
	var cp atomic.Pointer[Client]
	pools := holdingPools(t, reals, func(_ int, name string) bool {
		if !strings.EqualFold(name, "SET") {
			return false
		}
		if c := cp.Load(); c != nil {
			now := time.Now()
			for i := range c.masters {
				c.bound.Note(i, now.Add(-slow), now)
			}
		}
		return delay > 0
	}, delay)
	c := identified(t)(newRedigo(pools, withPipelining(pipelined), WithTimeout(50*time.Millisecond)))
	cp.Store(c)
	return c
}

// A fresh Client whose masters all answer an acquisition in 120 ms, past
// the 50 ms timeout: its round starts waiting the timeout (nothing was
// seen yet), and answers of 150 ms are read while it waits. When its wait
// ends, the round waits on to its start and the bound as it is now, and
// counts its masters' answers, rather than failing with every master up.
// Its validity is still counted from its start.
func TestAdaptiveBound_aRoundWaitsOnWhenTheBoundRisesMeanwhile(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "pooled"}[pipelined], func(t *testing.T) {
			c := risingClient(t, redistest.Start(t, 3), pipelined, 120*time.Millisecond, 150*time.Millisecond)
			const ttl = 10 * time.Second
			if b := c.bound.For(ttl, time.Now()); b != c.timeout {
				t.Fatalf("a fresh Client's bound is %v, want the timeout %v", b, c.timeout)
			}
			ctx := context.Background()
			start := time.Now()
			l, err := c.TryAcquire(ctx, "risen:first", WithTTL(ttl))
			took := time.Since(start)
			if err != nil {
				t.Fatalf("first TryAcquire on masters answering in 120 ms, the bound raised meanwhile: %v (after %v)", err, took)
			}
			if until := l.Until(); until.After(start.Add(ttl)) {
				t.Errorf("validity until %v, past the start and the TTL %v", until, start.Add(ttl))
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
		})
	}
}

// Two of three masters stopped (SIGSTOP) while answers read during the
// round raise the bound to its cap: the acquisition, which needs one of
// them, still fails, within the cap (and what patience adds), and its
// error names the wait it rose to. With one master stopped, a round
// reaches its quorum on the two others and returns at once, the raised
// bound notwithstanding.
func TestAdaptiveBound_risenWaitOnStoppedMasters_pausedMaster(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "pooled"}[pipelined], func(t *testing.T) {
			servers := redistest.Start(t, 3)
			c := risingClient(t, servers, pipelined, 0, 2*time.Second)
			ctx := context.Background()

			// Two masters stopped: no quorum. The cap: a tenth of 2 s.
			for _, s := range servers[1:] {
				if err := s.Pause(); err != nil {
					t.Fatal(err)
				}
				defer s.Resume()
			}
			ceiling := c.bound.Ceiling(defaultTTLForTest)
			start := time.Now()
			_, err := c.TryAcquire(ctx, "risen:two", WithTTL(defaultTTLForTest))
			took := time.Since(start)
			if !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("TryAcquire with two of three masters stopped: %v, want ErrNotAcquired", err)
			}
			if !strings.Contains(err.Error(), "did not answer in time ("+ceiling.String()+")") {
				t.Errorf("error %q does not name the risen wait %v", err, ceiling)
			}
			if limit := ceiling + stall.LateBound(c.timeout); took > limit {
				t.Errorf("the stopped masters were given up after %v, want at most %v", took, limit)
			}

			// One master stopped: the quorum answers, and the round does
			// not wait for the stopped one. (Cap: a second, with a TTL
			// of 10 s; every round's answers raise the bound to it.)
			if err := servers[1].Resume(); err != nil {
				t.Fatal(err)
			}
			const ttl = 10 * time.Second
			redistest.Eventually(t, 10*time.Second, "an acquisition with two masters of three up", func() bool {
				l, err := c.TryAcquire(ctx, "risen:one:warm", WithTTL(ttl))
				if err != nil {
					return false
				}
				_ = l.Release(ctx)
				return true
			})
			ceiling = c.bound.Ceiling(ttl)
			for i := range 3 {
				start := time.Now()
				l, err := c.TryAcquire(ctx, "risen:one:"+string(rune('a'+i)), WithTTL(ttl))
				took := time.Since(start)
				if err != nil {
					t.Fatalf("TryAcquire with one master of three stopped: %v", err)
				}
				if took >= ceiling/2 {
					t.Errorf("TryAcquire with one master stopped took %v: waited for it (cap %v)", took, ceiling)
				}
				_ = l.Release(ctx)
			}
		})
	}
}
