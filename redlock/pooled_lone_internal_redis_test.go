package redlock

import (
	"context"
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
	return lonePooledOf(t, s.Pool(), timeout)
}

// lonePooledOf is lonePooled on the pool pl.
func lonePooledOf(t *testing.T, pl pool.Pool, timeout time.Duration) (*Client, redigot.PooledState) {
	t.Helper()
	c, err := newRedigo([]pool.Pool{pl}, WithTimeout(timeout), withPipelining(false))
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

// loneHeld starts a master, makes a client of it alone on the pooled
// transport with the given timeout, warms its lone connection, and locks
// key for a minute.
func loneHeld(t *testing.T, timeout time.Duration, key string) (*redistest.Server, *Client, redigot.PooledState, *Lock) {
	t.Helper()
	s := redistest.StartOne(t)
	c, p := lonePooled(t, s, timeout)
	warmLone(t, c, p)
	l, err := c.TryAcquire(context.Background(), key, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return s, c, p, l
}

func TestPooledLone_repliesAreReadByTheirCaller(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	c, p := lonePooled(t, s, 5*time.Second)
	warmLone(t, c, p)
	before := p.LoneReads()
	lockExtendRelease(t, c, "lone:1", 50)
	if got := p.LoneReads() - before; got < 75 {
		t.Errorf("%d of 150 replies read by their caller, want most", got)
	}
}

// A caller that stops waiting at its per-master timeout (the master is
// SIGSTOPped) returns then; the reply is still read, and the late release
// frees the key when the master resumes, not at its TTL.
func TestPooledLone_pausedMasterTimesOutAndTheLateReleaseFreesTheKey(t *testing.T) {
	redistest.SkipShort(t)
	s, c, p, l := loneHeld(t, 100*time.Millisecond, "lone:paused")
	pausedReleaseFreesTheKey(t, c, s, l, "lone:paused", func() bool { return p.BeatUsers() == 0 })
}

// A caller whose ctx ends while it waits for its own reply returns with
// ctx's error, long before the per-master timeout; the late grant is
// rolled back when the master resumes.
func TestPooledLone_cancelEndsTheWaitAndTheLateGrantIsRolledBack(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	c, p := lonePooled(t, s, 30*time.Second)
	warmLone(t, c, p)
	cancelWhilePaused(t, c, s, "lone:cancel")
}

// After SCRIPT FLUSH the lone connection's EVALSHA gets NOSCRIPT and the
// script runs by EVAL: the release still frees the key.
func TestPooledLone_noScriptRunsTheScriptByEval(t *testing.T) {
	redistest.SkipShort(t)
	s, _, _, l := loneHeld(t, 5*time.Second, "lone:noscript")
	ctx := context.Background()
	if _, err := s.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after SCRIPT FLUSH: %v", err)
	}
	waitGone(t, s, "lone:noscript", 5*time.Second)
}
