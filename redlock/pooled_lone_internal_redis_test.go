package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

// On the pooled transport a lone master's commands run on their callers'
// goroutines, on a connection kept for them (pooled_lone.go): these tests
// check that the caller reads its reply, that one that stops waiting (the
// per-master timeout, its ctx) returns then while the reply is still read
// and counts, and that a late grant is rolled back.

// lonePooled returns a client of one master on the pooled transport, and
// the transport.
func lonePooled(t *testing.T, s *redistest.Server, timeout time.Duration) (*Client, redigot.PooledState) {
	t.Helper()
	c, err := newRedigo([]pool.Pool{s.Pool()}, WithTimeout(timeout), withPipelining(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p, ok := c.masters[0].t.(redigot.PooledState)
	if !ok {
		t.Fatalf("transport is %T, want the pooled transport", c.masters[0].t)
	}
	return c, p
}

// warmLone runs lock+unlock cycles until a reply was read by its caller:
// the lone connection is dialed in the background at the first command.
func warmLone(t *testing.T, c *Client, p redigot.PooledState) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !redistest.WaitFor(ctx, func() bool {
		l, err := c.TryAcquire(ctx, "lone:warm", WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return p.LoneReads() > 0
	}) {
		t.Fatal("no reply read by its caller")
	}
}

func TestPooledLone_repliesAreReadByTheirCaller(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	c, p := lonePooled(t, s, 5*time.Second)
	warmLone(t, c, p)
	before := p.LoneReads()
	ctx := context.Background()
	for i := range 50 {
		l, err := c.TryAcquire(ctx, "lone:1")
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
	if got := p.LoneReads() - before; got < 75 {
		t.Errorf("%d of 150 replies read by their caller, want most", got)
	}
}

// A caller that stops waiting at its per-master timeout (the master is
// SIGSTOPped) returns then; the reply is still read, and the late release
// frees the key when the master resumes, not at its TTL.
func TestPooledLone_pausedMasterTimesOutAndTheLateReleaseFreesTheKey(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	c, p := lonePooled(t, s, 100*time.Millisecond)
	warmLone(t, c, p)
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "lone:paused", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = l.Release(ctx)
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
		t.Errorf("release returned after %v, want about the 100ms timeout", took)
	}
	waitGone(t, s, "lone:paused", 20*time.Second) // the TTL is a minute
	// The transport still serves locks.
	l2, err := c.TryAcquire(ctx, "lone:paused")
	if err != nil {
		t.Fatalf("after the master resumed: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A caller whose ctx ends while it waits for its own reply returns with
// ctx's error, long before the per-master timeout; the late grant is
// rolled back when the master resumes.
func TestPooledLone_cancelEndsTheWaitAndTheLateGrantIsRolledBack(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	c, p := lonePooled(t, s, 30*time.Second)
	warmLone(t, c, p)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.TryAcquire(cctx, "lone:cancel", WithTTL(time.Minute))
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
	waitGone(t, s, "lone:cancel", 20*time.Second)
}

// After SCRIPT FLUSH the lone connection's EVALSHA gets NOSCRIPT and the
// script runs by EVAL: the release still frees the key.
func TestPooledLone_noScriptRunsTheScriptByEval(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	c, p := lonePooled(t, s, 5*time.Second)
	warmLone(t, c, p)
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "lone:noscript", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after SCRIPT FLUSH: %v", err)
	}
	waitGone(t, s, "lone:noscript", 5*time.Second)
}
