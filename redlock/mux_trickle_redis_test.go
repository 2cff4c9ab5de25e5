package redlock_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// trickleProxy stands in front of upstream: on each lock connection, the
// first SET is answered with "+" and then one byte every 30 ms, never a
// whole reply; what comes after it on that connection is run and not
// answered. The reader of a pipelined connection thus always has bytes
// arriving (ReplyWaiting may see one) and never a reply. sets counts the
// SETs the proxy read, carried the connections that carried one.
func trickleProxy(t *testing.T, upstream string) (p *hostile.Proxy, sets, carried func() int) {
	var (
		mu       sync.Mutex
		trickled = map[*hostile.Conn]bool{}
		nsets    int
	)
	p = hostile.NewProxy(t, upstream, func(c *hostile.Conn, cmd []string) hostile.Verdict {
		if c.LockIndex < 0 {
			return hostile.Forward
		}
		mu.Lock()
		defer mu.Unlock()
		if cmd[0] == "SET" {
			nsets++
		}
		if trickled[c] {
			return hostile.Swallow
		}
		if cmd[0] != "SET" {
			return hostile.Forward
		}
		trickled[c] = true
		go func() {
			if c.Write("+") != nil {
				return
			}
			tk := time.NewTicker(30 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-c.Quit():
					return
				case <-c.Gone():
					return
				case <-tk.C:
				}
				if c.Write("O") != nil {
					return
				}
			}
		}()
		return hostile.Swallow
	})
	sets = func() int {
		mu.Lock()
		defer mu.Unlock()
		return nsets
	}
	carried = func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(trickled)
	}
	return p, sets, carried
}

// TestMux_trickleMasterFailsRoundsAndIsRedialed: a master that
// trickles a byte every 30 ms and never completes a reply, on a pipelined
// connection (timeout 50 ms, N=3). Rounds that do not need it end at the
// quorum; rounds that need it (another value holds the key on a second
// master) must fail within a few timeouts, not be held while bytes keep
// coming; the connection is broken at the stall bound (1 s) and redialed,
// not piled up; Close is bounded and leaves no goroutine.
func TestMux_trickleMasterFailsRoundsAndIsRedialed(t *testing.T) {
	redistest.SkipShort(t)
	reals := redistest.Start(t, 3)
	ignore := goleak.IgnoreCurrent()
	proxy, sets, carried := trickleProxy(t, reals[2].Addr())
	started := time.Now()
	const timeout = 50 * time.Millisecond
	c, err := redigo.NewFromAddrs([]string{reals[0].Addr(), reals[1].Addr(), proxy.Addr()},
		redlock.WithTimeout(timeout), redigo.WithPipelining(true))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			c.Close()
		}
	}()
	ctx := context.Background()
	// Not needed: two masters answer.
	var free []time.Duration
	failed := 0
	end := time.Now().Add(time.Second)
	for i := 0; time.Now().Before(end); i++ {
		begin := time.Now()
		l, err := c.TryAcquire(ctx, fmt.Sprintf("trickle:free:%d", i), redlock.WithTTL(10*time.Second))
		if err != nil {
			// One of the two answering masters may miss a 50 ms
			// timeout now and then on a busy machine.
			failed++
			t.Logf("acquire with two masters of three up: %v", err)
			continue
		}
		_ = l.Release(ctx)
		free = append(free, time.Since(begin))
	}
	if failed > len(free)/20 {
		t.Fatalf("%d of %d acquisitions failed with two masters of three up", failed, failed+len(free))
	}
	setsFree := sets()
	// Needed: master 1 holds the key for someone else.
	if _, err := reals[1].Do("SET", "trickle:held", "someone-else", "PX", 60000); err != nil {
		t.Fatal(err)
	}
	var needed []time.Duration
	g0 := runtime.NumGoroutine()
	gmax := g0
	end = time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(end) {
		begin := time.Now()
		l, err := c.TryAcquire(ctx, "trickle:held", redlock.WithTTL(10*time.Second))
		needed = append(needed, time.Since(begin))
		if err == nil {
			_ = l.Release(ctx)
			t.Fatal("acquired a key another value holds on one master of three, the third trickling")
		}
		gmax = max(gmax, runtime.NumGoroutine())
	}
	begin := time.Now()
	_ = c.Close()
	closed = true
	closeTook := time.Since(begin)
	t.Logf("not needed: TryAcquire+Release %s, %d SETs reached the trickling master; needed: failed TryAcquire %s; "+
		"%d connections to the trickling master, %d of them carried a SET (%d SETs in all); goroutines %d -> max %d; Close took %v",
		durStats(free), setsFree, durStats(needed), proxy.Accepted(), carried(), sets(), g0, gmax, closeTook.Round(time.Millisecond))
	if m := maxDur(needed); m > 10*timeout {
		t.Errorf("a round that needed the trickling master took %v (timeout %v)", m, timeout)
	}
	if closeTook > 2*time.Second {
		t.Errorf("Close took %v", closeTook)
	}
	// A connection a SET reached trickles until it is broken at the stall
	// bound (at least a second) and the next is dialed: at most one a
	// second after the first. A dial that fails before carrying a SET (its
	// handshake past the timeout, on a busy host) is followed by the next
	// no sooner than the redial delay (half a second here): at most two a
	// second; the wake-up subscription's connections count with these.
	// Each is bounded at 2 + 2 a second: a busy host stretches the test,
	// not these rates.
	window := time.Since(started)
	limit := 2 + int(2*window.Seconds())
	if n := carried(); n > limit {
		t.Errorf("%d connections to the trickling master carried a SET in %v, want at most %d", n, window.Round(time.Millisecond), limit)
	}
	if n := proxy.Accepted() - carried(); n > limit {
		t.Errorf("%d connections to the trickling master carried no SET in %v, want at most %d", n, window.Round(time.Millisecond), limit)
	}
	if gmax > g0+50 {
		t.Errorf("goroutines grew from %d to %d", g0, gmax)
	}
	// The proxy's own goroutines end when the test does.
	goleak.VerifyNone(t, ignore, goleak.IgnoreAnyFunction("github.com/quorumlock/quorumlock/internal/hostile.(*master).accept"),
		goleak.IgnoreAnyFunction("github.com/quorumlock/quorumlock/internal/hostile.(*Proxy).serve"),
		goleak.IgnoreAnyFunction("github.com/quorumlock/quorumlock/internal/hostile.listen.func1"),
		goleak.IgnoreAnyFunction("github.com/quorumlock/quorumlock/internal/hostile.(*master).accept.func1"),
		goleak.IgnoreAnyFunction("github.com/quorumlock/quorumlock/redlock_test.trickleProxy.func1.1"))
}

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
