package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

// A lone master's replies are read by their callers (muxConn.readOwn):
// these tests check that the caller that stops waiting hands the reading
// back to the reader goroutine without breaking the connection, that a
// late reply still counts, and that callers reading their own replies and
// callers served by the reader keep each holder's order.

// loneMaster returns a pipelined client on one real master, and its mux.
func loneMaster(t *testing.T, s *redistest.Server, timeout time.Duration) (*Client, redigot.MuxState) {
	t.Helper()
	return loneMasterOn(t, s.Pool(), timeout)
}

// loneMasterOn returns a pipelined client on the master behind p, and its mux.
func loneMasterOn(t *testing.T, p pool.Pool, timeout time.Duration) (*Client, redigot.MuxState) {
	t.Helper()
	c, err := newRedigo([]pool.Pool{p}, WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	mx, ok := c.masters[0].t.(redigot.MuxState)
	if !ok {
		t.Fatalf("transport is %T, want the pipelined transport", c.masters[0].t)
	}
	return c, mx
}

// proxiedClient returns a pipelined client on one master behind p.
func proxiedClient(t *testing.T, p *hostile.Proxy) *Client {
	t.Helper()
	pl, err := pool.New(p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pl.Close() })
	c, err := newRedigo([]pool.Pool{pl}, WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitGone waits (up to bound) until key is absent on s.
func waitGone(t *testing.T, s *redistest.Server, key string, bound time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if !redistest.WaitFor(ctx, func() bool {
		n, err := s.Do("EXISTS", key)
		return err == nil && n == int64(0)
	}) {
		t.Fatalf("%s still on the master after %v", key, bound)
	}
}

// lockExtendRelease runs n cycles of lock, extend and release of key on c,
// failing t at the first error.
func lockExtendRelease(t *testing.T, c *Client, key string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		l, err := c.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if err := l.Extend(ctx, 10*time.Second); err != nil {
			t.Fatalf("cycle %d: extend: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("cycle %d: release: %v", i, err)
		}
	}
}

func TestReadOwn_loneMasterRepliesAreReadByTheirCaller(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	c, mx := loneMaster(t, s, 5*time.Second)
	lockExtendRelease(t, c, "own:1", 50)
	// Every round's reply but the first contact's may be read by its
	// caller; most are on a quiet connection.
	if got := mx.OwnReads(); got < 75 {
		t.Errorf("%d of 150 replies read by their caller, want most", got)
	}
	if n := mx.LiveConns(); n != 1 {
		t.Errorf("%d live connections, want 1", n)
	}
}

// A caller that stops waiting at its per-master timeout (the master is
// SIGSTOPped) hands the reading back: the connection is not broken, the
// late reply is read when the master resumes, and a late release frees
// the key then, not at its TTL.
func TestReadOwn_pausedMasterLateReleaseFreesTheKey(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	c, mx := loneMaster(t, s, 100*time.Millisecond)
	ctx := context.Background()
	// A loaded machine may take longer than the 100 ms timeout for the
	// first contact (the dial, the script loads) or a later call: the
	// calls before and after the pause may try again, for a while.
	l, err := c.Acquire(ctx, "own:paused", WithTTL(time.Minute), WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	before := mx.OwnReads()
	pausedReleaseFreesTheKey(t, c, s, l, "own:paused", func() bool { return mx.Silence() == 0 })
	// The connection that carried the late reply still works, and replies are read
	// by their callers again: a caller reads its own only when it finds
	// the reader idle, which the reader that just delivered a reply may
	// not be yet on a loaded machine, so a few rounds are allowed.
	rounds := 0
	for ; rounds < 20 && mx.OwnReads() <= before; rounds++ {
		l2, err := c.Acquire(ctx, "own:paused", WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("after the master resumed: %v", err)
		}
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if mx.OwnReads() <= before {
		t.Errorf("no reply read by its caller after the hand-back, in %d rounds", rounds)
	}
	if n := mx.LiveConns(); n != 1 {
		t.Errorf("%d live connections, want the one (not broken by the hand-back)", n)
	}
}

// A caller whose ctx ends while it waits for its own reply returns with
// ctx's error, long before the per-master timeout; the late grant is
// rolled back when the master resumes.
func TestReadOwn_cancelEndsTheWaitAndTheLateGrantIsRolledBack(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	c, _ := loneMaster(t, s, 30*time.Second)
	ctx := context.Background()
	if l, err := c.TryAcquire(ctx, "own:warm", WithTTL(time.Minute)); err != nil { // first contact
		t.Fatal(err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cancelWhilePaused(t, c, s, "own:cancel")
}

// pausedReleaseFreesTheKey pauses s (SIGSTOP), releases l (held on key
// for a minute) on c, whose per-master timeout is short, and checks that
// the release fails with a timeout soon; that the late release frees the
// key once s resumes, not at its TTL; and, once read says the late reply
// was read (until then the master is down to the transport, and an
// acquisition fails unsent), that c still locks key.
func pausedReleaseFreesTheKey(t *testing.T, c *Client, s *redistest.Server, l *Lock, key string, read func() bool) {
	t.Helper()
	ctx := context.Background()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := l.Release(ctx)
	took := time.Since(start)
	if rerr := s.Resume(); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		t.Fatal("release on a SIGSTOPped lone master reported success")
	}
	if !errors.Is(err, ErrMasterTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("release error %v, want a timeout", err)
	}
	if took > 10*time.Second {
		t.Errorf("release returned after %v, want about the per-master timeout", took)
	}
	waitGone(t, s, key, 20*time.Second) // the TTL is a minute
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if !redistest.WaitFor(wctx, read) {
		t.Fatal("the late reply was never read")
	}
	l2, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("after the master resumed: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// cancelWhilePaused pauses s (SIGSTOP), runs c.TryAcquire on key with a
// ctx cancelled after 50ms, and checks that it returns with
// context.Canceled long before c's per-master timeout (30s), and that the
// late grant is rolled back once s resumes.
func cancelWhilePaused(t *testing.T, c *Client, s *redistest.Server, key string) {
	t.Helper()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.TryAcquire(cctx, key, WithTTL(time.Minute))
	took := time.Since(start)
	if rerr := s.Resume(); rerr != nil {
		t.Fatal(rerr)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire: %v, want context.Canceled", err)
	}
	if took > 15*time.Second {
		t.Errorf("TryAcquire returned after %v: the per-master timeout (30s), not ctx, ended it", took)
	}
	waitGone(t, s, key, 20*time.Second)
}

// Many goroutines on one lone master: some read their own replies, the
// others are served by the reader; a shared key stays exclusive, and
// every call succeeds.
func TestReadOwn_concurrentCallersStayExclusive(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	c, mx := loneMaster(t, s, 5*time.Second)
	ctx := context.Background()
	var holders, overlaps atomic.Int32
	everyGoroutine(t, 16, func(g int) error {
		for i := range 100 {
			key := fmt.Sprintf("own:g%d", g)
			if i%2 == 0 {
				key = "own:shared"
			}
			l, err := c.Acquire(ctx, key, WithWait(30*time.Second), WithBackoff(2*time.Millisecond, 5*time.Millisecond))
			if err != nil {
				return fmt.Errorf("goroutine %d, cycle %d: %w", g, i, err)
			}
			if key == "own:shared" {
				if holders.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(50 * time.Microsecond) // the subject: a hold long enough for an overlap to show
				holders.Add(-1)
			}
			if err := l.Release(ctx); err != nil {
				return fmt.Errorf("goroutine %d, cycle %d: release: %w", g, i, err)
			}
		}
		return nil
	})
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping holds of the shared key", n)
	}
	t.Logf("%d replies read by their callers", mx.OwnReads())
}

// The script cache flushed: a release read by its caller gets NOSCRIPT
// and is run again as EVAL on the same connection.
func TestReadOwn_scriptFlushedReleaseStillFrees(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	c, _ := loneMaster(t, s, 5*time.Second)
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "own:flush", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after SCRIPT FLUSH: %v", err)
	}
	waitGone(t, s, "own:flush", 5*time.Second)
}

// The master resets the connection before answering a release its caller
// reads: the caller hands it back, the reader settles it, and it is sent
// again on a new connection (Resend), which frees the key.
func TestReadOwn_resetWhileTheCallerReadsIsResent(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	var hung atomic.Bool
	p := hostile.NewProxy(t, s.Addr(), func(c *hostile.Conn, cmd []string) hostile.Verdict {
		if cmd[0] == "EVALSHA" && c.LockIndex == 0 && hung.CompareAndSwap(false, true) {
			return hostile.HangUp
		}
		return hostile.Forward
	})
	c := proxiedClient(t, p)
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "own:reset", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release across a reset: %v", err)
	}
	if !hung.Load() {
		t.Fatal("the proxy never reset the connection")
	}
	waitGone(t, s, "own:reset", 5*time.Second)
}

// A reply that does not fit its command (an integer to SET), read by its
// caller: the connection is out of step and is failed, the call fails,
// and the next call works on a new connection.
func TestReadOwn_strayReplyFailsTheConnectionNotTheClient(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	var strayed atomic.Bool
	p := hostile.NewProxy(t, s.Addr(), func(c *hostile.Conn, cmd []string) hostile.Verdict {
		if cmd[0] == "SET" && c.LockIndex == 0 && strayed.CompareAndSwap(false, true) {
			_ = c.Write(":7\r\n")
			return hostile.Swallow
		}
		return hostile.Forward
	})
	c := proxiedClient(t, p)
	ctx := context.Background()
	if _, err := c.TryAcquire(ctx, "own:stray", WithTTL(time.Minute)); err == nil {
		t.Fatal("TryAcquire succeeded on a reply that does not fit SET")
	}
	// The SET ran (swallowed, not answered): its grant is the client's
	// to undo, and the key must not stay.
	waitGone(t, s, "own:stray", 20*time.Second)
	l, err := c.TryAcquire(ctx, "own:stray")
	if err != nil {
		t.Fatalf("after the stray reply: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
