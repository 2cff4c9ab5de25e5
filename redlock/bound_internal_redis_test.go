package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/pool"
)

// slowClient is a Client on masters behind proxies that hold every SET
// for delay before they pass it on: a host whose masters all answer late.
func slowClient(t *testing.T, pipelined bool, delay time.Duration, opts ...Option) *Client {
	t.Helper()
	return slowClientOn(t, redistest.Start(t, 3), pipelined, delay, opts...)
}

// slowClientOn is slowClient on the masters reals.
func slowClientOn(t *testing.T, reals []*redistest.Server, pipelined bool, delay time.Duration, opts ...Option) *Client {
	t.Helper()
	return slowMastersClient(t, reals, func(int) bool { return true }, pipelined, delay, opts...)
}

// slowMastersClient is slowClientOn where only the masters i with slow(i)
// hold every SET for delay.
func slowMastersClient(t *testing.T, reals []*redistest.Server, slow func(i int) bool, pipelined bool, delay time.Duration, opts ...Option) *Client {
	t.Helper()
	pools := holdingPools(t, reals, func(i int, name string) bool { return slow(i) && strings.EqualFold(name, "SET") }, delay)
	return identified(t)(newRedigo(pools, append([]Option{withPipelining(pipelined)}, opts...)...))
}

// holdingPools returns pools of the masters reals, each behind a proxy
// that holds for delay every command named name that master i holds
// (hold(i, name)), then passes it on; the pools close with the test.
func holdingPools(t *testing.T, reals []*redistest.Server, hold func(i int, name string) bool, delay time.Duration) []pool.Pool {
	t.Helper()
	quit := make(chan struct{})
	t.Cleanup(func() { close(quit) })
	pools := make([]pool.Pool, len(reals))
	for i, s := range reals {
		px := hostile.NewProxy(t, s.Addr(), func(_ *hostile.Conn, cmd []string) hostile.Verdict {
			if hold(i, cmd[0]) {
				hostile.Hold(delay, quit)
			}
			return hostile.Forward
		})
		p, err := pool.New(px.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		pools[i] = p
	}
	return pools
}

// Every master answers an acquisition in 80 ms, past the 50 ms per-master
// timeout: the host is slow, no master is down. The first attempts fail
// (nothing was seen yet) and their late answers are noted; from then on
// each attempt waits for the masters, and succeeds.
func TestAdaptiveBound_slowMastersAreWaitedFor(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "pooled"}[pipelined], func(t *testing.T) {
			c := slowClient(t, pipelined, 80*time.Millisecond, WithTimeout(50*time.Millisecond))
			ctx := context.Background()
			for i := range 5 {
				l, err := c.TryAcquire(ctx, "slow:learn:"+string(rune('a'+i)))
				if err == nil {
					l.Release(ctx)
					break
				}
				// The late grants are answered (and rolled back) within
				// the delay: wait for their answers to be noted.
				redistest.Within(2*time.Second, func() bool { return c.bound.For(defaultTTLForTest, time.Now()) > c.timeout })
			}
			for i := range 5 {
				l, err := c.TryAcquire(ctx, "slow:"+string(rune('a'+i)))
				if err != nil {
					t.Fatalf("attempt %d on slow masters: %v", i, err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatalf("release %d: %v", i, err)
				}
			}
		})
	}
}

// defaultTTLForTest is the TTL of the tests' locks: the bound's cap is a
// tenth of it.
const defaultTTLForTest = 2 * time.Second

// Masters answered slowly of late (the bound is at its cap), then two of
// three stop (SIGSTOP): an acquisition, which needs one of them, fails
// once the cap has passed, not at the twice-the-peak the slowness would
// ask for; its error names the wait.
func TestAdaptiveBound_stoppedMastersFailWithinTheCap(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "pooled"}[pipelined], func(t *testing.T) {
			servers := redistest.Start(t, 3)
			timeout := 50 * time.Millisecond
			c := leadClient(t, servers, pipelined, WithTimeout(timeout))
			ctx := context.Background()
			now := time.Now()
			for i := range c.masters {
				c.bound.Note(i, now.Add(-2*time.Second), now) // uncapped: 4 s
			}
			// The cap: a tenth of the TTL, 200 ms.
			ceiling := c.bound.Ceiling(defaultTTLForTest)
			if got := c.bound.For(defaultTTLForTest, time.Now()); got != ceiling {
				t.Fatalf("bound %v after 2 s answers, want the cap %v", got, ceiling)
			}
			for _, s := range servers[1:] {
				if err := s.Pause(); err != nil {
					t.Fatal(err)
				}
				defer s.Resume()
			}
			start := time.Now()
			_, err := c.TryAcquire(ctx, "stopped:capped", WithTTL(defaultTTLForTest))
			took := time.Since(start)
			if !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("TryAcquire with two of three masters stopped: %v, want ErrNotAcquired", err)
			}
			if !strings.Contains(err.Error(), "did not answer in time ("+ceiling.String()+")") {
				t.Errorf("error %q does not name the capped wait %v", err, ceiling)
			}
			// The documented bound: the cap, and what patience adds for a
			// process that did not run (at most lateBound past it).
			if limit := ceiling + stall.LateBound(timeout); took > limit {
				t.Errorf("the stopped masters were given up after %v, want at most %v", took, limit)
			}
		})
	}
}
