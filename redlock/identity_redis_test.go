package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// Two addresses of one server ("localhost:P" and "127.0.0.1:P") would
// count one master twice toward a quorum. New cannot tell them apart by
// address; at first contact the client compares the servers' run_ids and
// from then on refuses every call that talks to the masters, naming both.
func TestClient_sameServerUnderTwoAddressesIsRefused(t *testing.T) {
	servers := redistest.Start(t, 2)
	port := strings.TrimPrefix(servers[0].Addr(), "127.0.0.1:")
	addrs := []string{servers[0].Addr(), servers[1].Addr(), "localhost:" + port}
	forEachPath(t, func(t *testing.T, path connPath) {
		c, err := redigo.NewFromAddrs(addrs, path.Option())
		if err != nil {
			t.Fatalf("New must not block or probe: %v", err)
		}
		defer c.Close()
		ctx := context.Background()
		for name, call := range map[string]func() error{
			"TryAcquire": func() error { _, err := c.TryAcquire(ctx, "dup-k"); return err },
			"Acquire":    func() error { _, err := c.Acquire(ctx, "dup-k", redlock.WithWait(0)); return err },
			"Inspect":    func() error { _, err := c.Inspect(ctx, "dup-k"); return err },
		} {
			err := call()
			if !errors.Is(err, redlock.ErrInvalid) {
				t.Fatalf("%s: %v, want an error matching ErrInvalid", name, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "masters 0 ("+addrs[0]+") and 2 ("+addrs[2]+") are the same Redis server") ||
				strings.Count(msg, "redlock: ") != 1 {
				t.Errorf("%s: %q does not name both masters once", name, msg)
			}
		}
		// Nothing was left on the server.
		leftover.None(t, servers[:1], "dup-k")
	})
}

// Distinct servers pass the check, and a hung master (SIGSTOP) at first
// contact costs the first call one bounded probe, not more: it is asked
// again in the background. The per-master timeout is long (1 s) so that
// a probe in the foreground cannot pass for a slow round: the round
// itself is decided in milliseconds by the two masters that answer, and
// on a busy machine in far less than a second.
func TestClient_identityProbeIsBounded(t *testing.T) {
	servers := redistest.Start(t, 3)
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[2].Resume()
	forEachPath(t, func(t *testing.T, path connPath) {
		addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
		const timeout = time.Second
		c, err := redigo.NewFromAddrs(addrs, path.Option(), redlock.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		start := time.Now()
		l, err := c.TryAcquire(ctx, "probe-k")
		if err != nil {
			t.Fatal(err)
		}
		first := time.Since(start)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The first call's round waited for the probe, which waits for
		// the hung master until the timeout: it is bounded by that.
		// Generous: a bound, not a measure.
		if first > 3*timeout {
			t.Errorf("the first call took %v with a hung master, want the probe's timeout (%v) and a round", first, timeout)
		}
		probed := redlock.IdentityProbed(c, 2)
		time.Sleep(1100 * time.Millisecond) // the subject: a probe's spacing (1 s) passes; the hung master is due again
		start = time.Now()
		l, err = c.TryAcquire(ctx, "probe-k")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		t.Logf("first call %v, later call %v", first, took)
		// The later call asked the hung master again...
		if again := redlock.IdentityProbed(c, 2); !again.After(probed) {
			t.Fatalf("the hung master was not probed again (last probe %v, before %v)", again, probed)
		}
		// ...and did not wait for it: a probe in the foreground would
		// cost the whole timeout, the round a few milliseconds.
		if took >= timeout {
			t.Errorf("a later call took %v: the hung master's probe is not in the background", took)
		}
	})
}

// The first call's round waits for the identity probe only as long as
// its own ctx allows; the probe goes on for the calls that can wait, and
// Close ends it at once. One master SIGSTOPped, the per-master timeout
// long, so that the probe outlasts the impatient caller's ctx.
func TestIdentity_firstCallHonoursCtx_pausedMaster(t *testing.T) {
	const timeout = 5 * time.Second
	forEachPath(t, func(t *testing.T, path connPath) {
		t.Parallel() // its own masters; the bounds have seconds of slack
		servers := redistest.Start(t, 3)
		if err := servers[2].Pause(); err != nil {
			t.Fatal(err)
		}
		defer servers[2].Resume()
		addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
		c, err := redigo.NewFromAddrs(addrs, path.Option(), redlock.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A patient caller starts the probe and waits for it.
		patient := make(chan error, 1)
		go func() {
			l, err := c.TryAcquire(context.Background(), "ctx-k")
			if err == nil {
				err = l.Release(context.Background())
			}
			patient <- err
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = c.TryAcquire(ctx, "ctx-k2")
		took := time.Since(start)
		// The documented error of a ctx that ended during the probe
		// names the master that did not answer.
		var qe *redlock.QuorumError
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redlock.ErrNotAcquired) || !errors.As(err, &qe) {
			t.Fatalf("an impatient first call: %v, want a *QuorumError matching ErrNotAcquired and context.DeadlineExceeded", err)
		}
		if len(qe.Unanswered) != 1 || qe.Unanswered[0] != 2 {
			t.Errorf("an impatient first call: %q (Unanswered %v), want master 2 unanswered", err, qe.Unanswered)
		}
		// The probe lasts the per-master timeout: a call as long as that
		// waited for the probe, not for its ctx.
		if took >= timeout {
			t.Errorf("the impatient call took %v, as long as the probe (%v): it waited for the probe, not for its ctx", took, timeout)
		}
		select {
		case err := <-patient:
			t.Fatalf("the patient call returned (%v) before the probe could end", err)
		default:
		}
		// The probe went on: the patient call gets its lock from the two
		// masters that answer.
		if err := <-patient; err != nil {
			t.Fatalf("the patient call: %v", err)
		}
	})
}

// Close during the probe of a SIGSTOPped master: the waiting call returns
// at once (the client is closed), and Close is bounded as documented (the
// paused master's dial or pooled command get one per-master timeout), not
// held up by the probe.
func TestIdentity_closeDuringProbe_pausedMaster(t *testing.T) {
	servers := redistest.Start(t, 3)
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[2].Resume()
	addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
	const timeout = 3 * time.Second
	forEachPath(t, func(t *testing.T, path connPath) {
		c, err := redigo.NewFromAddrs(addrs, path.Option(), redlock.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		// The probe starts with the call, so it cannot end by itself
		// before began+timeout: a return sooner than that is Close's.
		began := time.Now()
		waiting := make(chan error, 1)
		go func() {
			_, err := c.TryAcquire(context.Background(), "close-k")
			waiting <- err
		}()
		if !waitForProbeWaiter(timeout / 2) {
			c.Close()
			t.Fatalf("after %v, the call is still not waiting for the identity probe", timeout/2)
		}
		closed := make(chan struct{})
		go func() {
			c.Close()
			close(closed)
		}()
		select {
		case err := <-waiting:
			if !errors.Is(err, redlock.ErrClosed) {
				t.Errorf("the waiting call: %v, want an error matching ErrClosed", err)
			}
			if took := time.Since(began); took >= timeout {
				t.Errorf("the waiting call returned %v after it began, as late as the probe's own end (%v): Close did not end its wait",
					took, timeout)
			}
		case <-time.After(2 * timeout):
			t.Fatal("the call waiting for the probe did not return at Close")
		}
		select {
		case <-closed:
		case <-time.After(3*timeout + 2*time.Second):
			t.Fatal("Close hangs")
		}
	})
}

// waitForProbeWaiter reports whether, within d, some goroutine is waiting
// in a round (redlock's (*Client).collect: with a hung master, the first
// round waits for the identity probe), rather than sleeping and hoping
// that a call has got that far. It looks at every goroutine: the
// package's tests do not run in parallel.
func waitForProbeWaiter(d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	buf := make([]byte, 1<<20)
	return redistest.WaitFor(ctx, func() bool {
		n := runtime.Stack(buf, true)
		return bytes.Contains(buf[:n], []byte("redlock.(*Client).collect("))
	})
}

// Pools of the user's own: the probe goes over the transport the rounds
// use (the client's own pipelined connection when the pool can dial), so
// the user's pool lends nothing; one server under two addresses is still
// refused, naming both.
func TestIdentity_userPools_probeOverTransport(t *testing.T) {
	servers := redistest.Start(t, 2)
	port := strings.TrimPrefix(servers[0].Addr(), "127.0.0.1:")
	addrs := []string{servers[0].Addr(), servers[1].Addr(), "localhost:" + port}
	for _, shape := range userPoolShapes {
		t.Run(shape.name, func(t *testing.T) {
			for _, dup := range []bool{false, true} {
				n := 2
				if dup {
					n = 3
				}
				var pools []pool.Pool
				var user []userPool
				for i, a := range addrs[:n] {
					u := shape.make(t, a, fmt.Sprintf("ident-%d", i))
					user = append(user, u)
					pools = append(pools, u.pool)
				}
				c, err := redigo.New(pools, redlock.WithTimeout(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				l, err := c.TryAcquire(context.Background(), "ident-k")
				if dup {
					// A pool of the user's own has no address: New names it.
					if !errors.Is(err, redlock.ErrInvalid) ||
						!strings.Contains(err.Error(), "masters 0 (master-0) and 2 (master-2) are the same Redis server") {
						t.Errorf("one server twice: %v, want ErrInvalid naming both", err)
					}
				} else if err != nil {
					t.Fatal(err)
				} else if err := l.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
				if shape.pipelined {
					for i, u := range user {
						if st := u.stats(); st.ActiveCount+st.IdleCount != 0 {
							t.Errorf("dup=%v: master %d's pool lent connections: %+v", dup, i, st)
						}
					}
				}
				c.Close()
			}
		})
	}
}
