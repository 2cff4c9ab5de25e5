package rueidis

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	lib "github.com/redis/rueidis"

	"github.com/quorumlock/quorumlock/internal/adaptertest"
	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// lateMasters starts n masters and a Client over rueidis clients of them
// with a 200 ms per-master timeout, warmed by one acquisition.
func lateMasters(t *testing.T, n int) ([]*redistest.Server, *redlock.Client) {
	t.Helper()
	ms := startMasters(t, n)
	c := newClient(t, ms.clients, redlock.WithTimeout(200*time.Millisecond))
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	return ms.servers, c
}

// pause stops servers (SIGSTOP) and returns a function that runs them
// again (idempotent; also run when the test ends).
func pause(t *testing.T, servers ...*redistest.Server) func() {
	t.Helper()
	for _, s := range servers {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	done := false
	resume := func() {
		if done {
			return
		}
		done = true
		for _, s := range servers {
			_ = s.Resume()
		}
	}
	t.Cleanup(resume)
	return resume
}

// noKeyWithin fails t unless no master holds a key of name within d.
func noKeyWithin(t *testing.T, servers []*redistest.Server, name string, d time.Duration) {
	t.Helper()
	var left []string
	ok := redistest.WaitFor(ctxWithin(t, d), func() bool {
		left = left[:0]
		for _, s := range servers {
			ks, err := s.Do("KEYS", "*"+name+"*")
			if err != nil {
				left = append(left, s.Addr()+" "+err.Error())
				continue
			}
			for _, k := range ks.([]any) {
				left = append(left, s.Addr()+" "+string(k.([]byte)))
			}
		}
		return len(left) == 0
	})
	if !ok {
		t.Fatalf("keys of %q left %v after the round failed: %v", name, d, left)
	}
}

func ctxWithin(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitOut waits d without sleeping a fixed time in the test's body.
func waitOut(t *testing.T, d time.Duration) {
	redistest.WaitFor(ctxWithin(t, d), func() bool { return false })
}

// Two masters of three stopped (SIGSTOP) while an acquisition runs: it
// fails at the timeout. Their SETs were sent; they run when the masters
// run again, within the lane's late window (the grants are read late and
// delivered) or after it. Either way the keys they left are rolled back,
// long before their TTL.
func TestLateGrant_afterAFailedRoundIsRolledBack(t *testing.T) {
	for _, stopped := range []time.Duration{300 * time.Millisecond, 2500 * time.Millisecond, 5 * time.Second} {
		t.Run(stopped.String(), func(t *testing.T) {
			servers, c := lateMasters(t, 3)
			untilTheSETRan(t, servers[1], func(try int) {
				resume := pause(t, servers[1], servers[2])
				name := fmt.Sprintf("lategrant%v-%d", stopped, try)
				start := time.Now()
				l, err := c.TryAcquire(context.Background(), name, redlock.WithTTL(30*time.Second))
				if err == nil {
					_ = l.Release(context.Background())
					t.Fatal("TryAcquire succeeded with two masters of three stopped")
				}
				waitOut(t, stopped-time.Since(start))
				resume()
				noKeyWithin(t, servers, name, 5*time.Second)
			})
		})
	}
}

// untilTheSETRan runs attempt until the stopped master s ran a SET in
// it, at most four times. A command still queued in the lane at its
// deadline fails there, unsent: on a busy machine an attempt can end
// before its SET reached s, and then it checked nothing.
func untilTheSETRan(t *testing.T, s *redistest.Server, attempt func(try int)) {
	t.Helper()
	for try := 0; try < 4; try++ {
		sets := s.Calls("set")
		attempt(try)
		if s.Calls("set") != sets {
			return
		}
		t.Logf("attempt %d: the stopped master never ran the SET (it was not sent before its deadline)", try)
	}
	t.Fatal("the stopped master never ran the SET in four attempts: the case this test checks did not occur")
}

// One master of three stopped while a lock is acquired (on the other
// two) and at once released: the stopped master runs the SET when it
// runs again, after the release reached the others; the key it leaves
// goes too, long before its TTL.
func TestLateGrant_afterTheReleaseIsRemoved(t *testing.T) {
	for _, stopped := range []time.Duration{300 * time.Millisecond, 2500 * time.Millisecond, 5 * time.Second} {
		t.Run(stopped.String(), func(t *testing.T) {
			servers, c := lateMasters(t, 3)
			untilTheSETRan(t, servers[2], func(try int) {
				resume := pause(t, servers[2])
				name := fmt.Sprintf("relgrant%v-%d", stopped, try)
				start := time.Now()
				ctx := context.Background()
				l, err := c.TryAcquire(ctx, name, redlock.WithTTL(30*time.Second))
				if err != nil {
					t.Fatalf("TryAcquire with one master of three stopped: %v", err)
				}
				err = l.Release(ctx)
				t.Logf("Release: %v", err)
				waitOut(t, stopped-time.Since(start))
				resume()
				noKeyWithin(t, servers, name, 5*time.Second)
			})
		})
	}
}

// An extension that fails (two masters of three stopped) leaves Until;
// its late answers never move it.
func TestLateExtend_neverMovesUntil(t *testing.T) {
	servers, c := lateMasters(t, 3)
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "lateext", redlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	before := l.Until()
	resume := pause(t, servers[1], servers[2])
	if err := l.Extend(ctx, 20*time.Second); err == nil {
		t.Fatal("Extend succeeded with two masters of three stopped")
	}
	after := l.Until()
	if after.After(before) {
		t.Fatalf("a failed Extend moved Until by %v", after.Sub(before))
	}
	waitOut(t, 300*time.Millisecond)
	resume()
	// The late answers come within the late window (1 s past the
	// deadline): wait past it.
	waitOut(t, 1500*time.Millisecond)
	if got := l.Until(); !got.Equal(after) {
		t.Fatalf("late extension answers moved Until by %v", got.Sub(after))
	}
	_ = l.Release(ctx)
	noKeyWithin(t, servers, "lateext", 5*time.Second)
}

// Close while an acquisition's SETs are in their late window on two
// stopped masters: Close returns within its bound, no goroutine is left
// (TestMain's goleak), and the keys the late SETs leave expire at their
// TTL at the latest.
func TestClose_duringTheLateWindow(t *testing.T) {
	servers, c := lateMasters(t, 3)
	resume := pause(t, servers[1], servers[2])
	const ttl = 2 * time.Second
	if l, err := c.TryAcquire(context.Background(), "lateclose", redlock.WithTTL(ttl)); err == nil {
		_ = l.Release(context.Background())
		t.Fatal("TryAcquire succeeded with two masters of three stopped")
	}
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(4 * time.Second):
		resume()
		<-closed
		t.Errorf("Close took %v with two masters stopped in the late window", time.Since(start))
	}
	t.Logf("Close returned after %v", time.Since(start))
	resume()
	noKeyWithin(t, servers, "lateclose", ttl+2*time.Second)
}

// One master of five stopped for 10 s: a measurement of the acquisition
// rate (QUORUMLOCK_MEASURE=1).
func TestStoppedMaster_acquisitionRate(t *testing.T) {
	if os.Getenv("QUORUMLOCK_MEASURE") == "" {
		t.Skip("measurement; set QUORUMLOCK_MEASURE=1")
	}
	servers, c := lateMasters(t, 5)
	var resume func()
	adaptertest.AcquisitionRate(t, c, func() { resume = pause(t, servers[4]) }, func() { resume() })
}

// One master of three answers everything 2 s late, forever: acquisitions
// go on on the other two, and the goroutines and heap stay bounded.
func TestLateForever_boundedResources(t *testing.T) {
	var clients []lib.Client
	for i, s := range redistest.Start(t, 3) {
		addr := s.Addr()
		if i == 2 {
			addr = hostile.Delay(t, addr, 2*time.Second)
		}
		clients = append(clients, dial(t, addr))
	}
	c := newClient(t, clients, redlock.WithTimeout(200*time.Millisecond))
	adaptertest.BoundedBesideALateMaster(t, c)
}

// A master that answers a lock command late, with bytes that are no RESP
// reply: the Client does not take them for a grant, does not panic, and
// goes on acquiring on the others.
func TestLateGarbage_isNoGrant(t *testing.T) {
	var clients []lib.Client
	for i, s := range redistest.Start(t, 3) {
		addr := s.Addr()
		if i == 2 {
			addr = adaptertest.GarbageProxy(t, addr)
		}
		clients = append(clients, dial(t, addr, func(o *lib.ClientOption) { o.AlwaysRESP2 = true }))
	}
	c := newClient(t, clients, redlock.WithTimeout(50*time.Millisecond))
	adaptertest.GarbageIsNoGrant(t, c)
}
