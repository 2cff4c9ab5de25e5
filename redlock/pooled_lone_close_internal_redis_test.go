package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Close against a lone caller on the pooled transport whose master is
// SIGSTOPped: the caller waits for its reply in Send, or has stopped
// waiting (its ctx ended) and left the reading to a goroutine. Close must
// return within a few per-master timeouts, leave no goroutine, and leave
// no key behind: a release written before Close runs when the master
// resumes; a grant read while Close waits is rolled back before Close
// returns.

// loneCloseTimeout is the per-master timeout of these tests: at a second
// the pooled transport reads a reply up to one timeout past its deadline
// (stall.LateBound), so Close's bound is a few timeouts.
const loneCloseTimeout = time.Second

// loneCloseClient starts a master (resumed, should it be stopped, when
// the test ends) and returns it, a client of it alone on the pooled
// transport with its lone connection dialed and free, the transport, and
// the goroutines that ran before the client (for goleak).
func loneCloseClient(t *testing.T) (*redistest.Server, *Client, redigot.PooledState, goleak.Option) {
	t.Helper()
	s := redistest.StartOne(t)
	t.Cleanup(func() { _ = s.Resume() })
	ignore := goleak.IgnoreCurrent()
	c, p := lonePooled(t, s, loneCloseTimeout)
	warmLone(t, c, p)
	return s, c, p, ignore
}

// closeWithin closes c and checks that it returned within three
// per-master timeouts.
func closeWithin(t *testing.T, c *Client) {
	t.Helper()
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("Close took %v", took)
	if took > 3*loneCloseTimeout {
		t.Errorf("Close took %v, over three per-master timeouts", took)
	}
}

// Close while a lone caller's release waits for its reply in Send, the
// master stopped: the release returns about the timeout, Close within its
// bound with no goroutine left, and the release, written before Close,
// frees the key when the master resumes.
func TestPooledLone_closeWhileTheCallerWaitsInSend(t *testing.T) {
	redistest.SkipShort(t)
	s, c, p, ignore := loneCloseClient(t)
	const key = "lone:close:send"
	ctx := context.Background()
	before := p.LoneReads()
	l, err := c.TryAcquire(ctx, key, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if p.LoneReads() == before {
		t.Fatal("the grant was not read by its caller: the lone connection is not in use")
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- l.Release(ctx) }()
	wctx, cancel := context.WithTimeout(ctx, loneCloseTimeout/2)
	inFlight := redistest.WaitFor(wctx, func() bool { return p.BeatUsers() > 0 })
	cancel()
	if !inFlight {
		t.Fatal("the release was not in flight by half the timeout")
	}
	closeWithin(t, c)
	select {
	case err = <-done:
	case <-time.After(3 * loneCloseTimeout):
		t.Fatal("the release did not return by Close and three per-master timeouts")
	}
	if took := time.Since(start); took > 3*loneCloseTimeout {
		t.Errorf("the release returned after %v", took)
	}
	if err == nil {
		t.Fatal("a release on a stopped master reported success")
	}
	if !errors.Is(err, ErrMasterTimeout) && !errors.Is(err, ErrClosed) {
		t.Errorf("release: %v, want a timeout or ErrClosed", err)
	}
	goleak.VerifyNone(t, ignore)
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, s, key, 10*time.Second) // the TTL is a minute
}

// A lone caller's acquisition whose ctx ends while the master is stopped
// returns at ctx; a goroutine reads on. Close follows at once, and the
// master resumes while the transport's Close waits for that read: the
// grant read then is rolled back before Close returns, within its bound,
// with no goroutine left.
func TestPooledLone_closeAfterCtxEndsRollsBackTheGrantReadDuringClose(t *testing.T) {
	redistest.SkipShort(t)
	s, c, p, ignore := loneCloseClient(t)
	const key = "lone:close:ctx"
	before := p.LoneReads()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.TryAcquire(ctx, key, WithTTL(time.Minute))
	if took := time.Since(start); took > loneCloseTimeout/2 {
		t.Errorf("TryAcquire returned after %v, its ctx ended at 50ms", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire: %v, want ctx's deadline", err)
	}
	// The master resumes while Close waits, after the one timeout Close
	// gives the work in flight (the transport is closing then) and before
	// the reading goroutine's bound (the deadline and one timeout): the
	// rollback goes to a closing transport.
	resume := time.AfterFunc(loneCloseTimeout+loneCloseTimeout/3, func() { _ = s.Resume() })
	defer resume.Stop()
	closeWithin(t, c)
	if p.LoneReads() != before {
		t.Error("a reply was read by a caller that had stopped waiting")
	}
	goleak.VerifyNone(t, ignore)
	if !s.WaitAbsent(key, loneCloseTimeout) {
		pttl, _ := s.Do("PTTL", key)
		t.Errorf("the grant read during Close was left on the master (PTTL %v ms)", pttl)
	}
}
