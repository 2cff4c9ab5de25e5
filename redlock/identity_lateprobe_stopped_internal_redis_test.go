package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// stoppedAfterGrantClient is a fresh Client of servers, closed with the
// test, whose master 2 is stopped (SIGSTOP) once it granted, its run_id
// probe unanswered; master 1 refuses key (another holder has it), so an
// attempt waits for master 2's probe. stopped is closed once master 2
// is stopped; the test resumes it at its end.
func stoppedAfterGrantClient(t *testing.T, servers []*redistest.Server, pipelined bool, key string, timeout time.Duration) (c *Client, stopped <-chan struct{}) {
	t.Helper()
	if _, err := servers[1].Do("SET", key, "another-holder", "PX", 600000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { servers[1].Do("DEL", key) })
	t.Cleanup(func() { _ = servers[2].Resume() })
	c = lateProbeClient(t, servers, pipelined, timeout, 0)
	ch := make(chan struct{})
	c.masters[2].t = &infoAfterGrant{Transport: c.masters[2].t, stop: func() {
		if err := servers[2].Pause(); err != nil {
			t.Error(err)
		}
		close(ch)
	}}
	return c, ch
}

// A round waiting for the probe of a master that granted and then
// stopped ends at the caller's ctx, however long its own bound: the
// attempt fails with ctx's error within ctx's deadline (and the rollback
// it does not wait for past ctx), and once the master runs again its
// grant is rolled back.
func TestIdentity_lateProbeWaitEndsAtCtx_pausedMaster(t *testing.T) {
	servers := redistest.Start(t, 3)
	const timeout = 200 * time.Millisecond
	const ctxAfter = 400 * time.Millisecond // within the round's own bound, timeout + 1 s
	const slack = 500 * time.Millisecond
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			key := "lateprobe:ctx:" + p.name
			c, _ := stoppedAfterGrantClient(t, servers, p.pipelined, key, timeout)
			ctx, cancel := context.WithTimeout(context.Background(), ctxAfter)
			defer cancel()
			start := time.Now()
			l, err := c.TryAcquire(ctx, key, WithTTL(time.Minute))
			took := time.Since(start)
			if err == nil {
				_ = l.Release(context.Background())
				t.Fatal("acquired on the grant of a master not identified")
			}
			t.Logf("took %v: %v", took, err)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v, want an error matching context.DeadlineExceeded", err)
			}
			if took > ctxAfter+slack {
				t.Errorf("the call took %v, past ctx's %v (with %v of slack)", took, ctxAfter, slack)
			}
			if err := servers[2].Resume(); err != nil {
				t.Fatal(err)
			}
			leftover.None(t, []*redistest.Server{servers[0], servers[2]}, key)
		})
	}
}

// Close ends a round waiting for the probe of a master that granted and
// then stopped: the attempt fails with ErrClosed, Close returns within
// its bound, nothing of the Client keeps running, and once the master
// runs again nothing of the attempt is left on it (nor on the others)
// past its TTL. The pipelined connection has the rollback queued behind
// the SET before Close ends it: none is left at once. The pooled
// transport sends no rollback after Close began to a master silent for a
// timeout (design.md, "Closing a client"), which the stopped master may
// be by then on a busy machine: its key may stay until its TTL.
func TestIdentity_closeEndsLateProbeWait_pausedMaster(t *testing.T) {
	servers := redistest.Start(t, 3)
	const timeout = 200 * time.Millisecond
	const ttl = 5 * time.Second // past the round's wait for the probe (timeout + 1 s)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			key := "lateprobe:close:" + p.name
			c, stopped := stoppedAfterGrantClient(t, servers, p.pipelined, key, timeout)
			type result struct {
				l   *Lock
				err error
			}
			done := make(chan result, 1)
			go func() {
				l, err := c.TryAcquire(context.Background(), key, WithTTL(ttl))
				done <- result{l, err}
			}()
			select {
			case <-stopped:
			case <-time.After(10 * time.Second):
				t.Fatal("master 2 never granted")
			}
			// The round now waits for master 2's probe (timeout + 1 s);
			// Close it meanwhile.
			start := time.Now()
			if err := c.Close(); err != nil {
				t.Logf("Close: %v", err)
			}
			took := time.Since(start)
			t.Logf("Close took %v", took)
			if took > 3*time.Second {
				t.Errorf("Close took %v with a round waiting for a stopped master's probe", took)
			}
			var r result
			select {
			case r = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the attempt did not return after Close")
			}
			if r.err == nil {
				_ = r.l.Release(context.Background())
				t.Fatal("acquired on the grant of a master not identified")
			}
			if !errors.Is(r.err, ErrClosed) {
				t.Errorf("%v, want an error matching ErrClosed", r.err)
			}
			if err := servers[2].Resume(); err != nil {
				t.Fatal(err)
			}
			goleak.VerifyNone(t, ignore)
			if p.pipelined {
				// The rollback was queued before Close ended the
				// connection: the resumed master runs it.
				leftover.None(t, []*redistest.Server{servers[0], servers[2]}, key)
				return
			}
			leftover.Within(t, ttl+leftover.Bound, []*redistest.Server{servers[0], servers[2]}, key)
		})
	}
}
