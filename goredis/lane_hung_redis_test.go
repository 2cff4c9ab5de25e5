package goredis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
)

// The lane's deadlines are pushed back by this process's
// stalls, up to lateBound past them. A hung master must still
// fail commands within that bound, with go-redis's ContextTimeoutEnabled
// either way; Close must not wait on it longer than go-redis does; late
// grants must be rolled back; and the 5 ms beat must stop once nothing
// waits.

func withLaneContext(on bool) func(*redis.Options) {
	return func(o *redis.Options) { o.ContextTimeoutEnabled = on }
}

// A hung master (SIGSTOP): every command fails, in flight or queued,
// by its deadline plus lateBound (the bound, on a process that runs, is
// rarely used: generous slack for a loaded machine), sent or not as it
// was, and the lane serves again once the master runs.
func TestLane_hungMasterFailsWithinTheBound(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", on), func(t *testing.T) {
			s, l := connectedLane(t, withLaneContext(on))
			s.stop()
			defer s.cont()
			const d = 100 * time.Millisecond
			type sent struct {
				at time.Time
				ch chan result
			}
			var all []sent
			for i := 0; i < 10; i++ {
				r, ch := cmd(d, "SET", fmt.Sprint("k", i), "1", "NX", "PX", 10000)
				all = append(all, sent{time.Now(), ch})
				l.send(r)
				time.Sleep(30 * time.Millisecond) // the subject: commands sent at different moments of the hang
			}
			for i, x := range all {
				res := wait(t, x.ch)
				el := time.Since(x.at)
				if !errors.Is(res.err, context.DeadlineExceeded) && !errors.Is(res.err, errDown) {
					t.Errorf("command %d on a hung master: %+v, want a timeout", i, res)
				}
				if bound := d + lateBound(d) + 1500*time.Millisecond; el > bound {
					t.Errorf("command %d failed %v after its send, bound %v", i, el, bound)
				}
			}
			s.cont()
			waitFor(t, "the lane serves again after the master ran", func() bool {
				r, ch := cmd(5*time.Second, "PING")
				l.send(r)
				res := wait(t, ch)
				return res.err == nil && res.v == "PONG"
			})
		})
	}
}

// Close with a command in flight on a hung master returns no later than
// go-redis gives up the batch: with ContextTimeoutEnabled, its context's
// deadline (the command's deadline plus lateBound; go-redis does not stop
// a read when the context is cancelled), else its ReadTimeout. Nothing
// is left running (goleak, TestMain).
func TestLane_closeWithACommandInFlightOnAHungMaster(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", on), func(t *testing.T) {
			s := startServer(t)
			const readTimeout = 2 * time.Second
			c := newClient(t, s, withLaneContext(on), func(o *redis.Options) { o.ReadTimeout = readTimeout })
			l := newLane(c, "test")
			r, ch := cmd(5*time.Second, "PING")
			l.send(r)
			wait(t, ch)
			s.stop()
			defer s.cont()
			const d = 100 * time.Millisecond
			r, ch = cmd(d, "SET", "k", "1", "NX", "PX", 10000)
			l.send(r)
			taken(t, l, r, true) // r's own batch: the PING's may still be finishing
			start := time.Now()
			l.close()
			el := time.Since(start)
			if res := wait(t, ch); res.err == nil || !res.sent {
				t.Fatalf("in flight at close: %+v", res)
			}
			bound := readTimeout
			if on {
				bound = min(bound, d+lateBound(d))
			}
			t.Logf("Close took %v (go-redis gives the batch up after %v)", el, bound)
			if el > bound+time.Second {
				t.Errorf("Close took %v, go-redis gives up after %v", el, bound)
			}
		})
	}
}

// A failed acquisition whose SETs a hung master runs once it runs again
// (a late grant): the Client's rollback reaches it, and no key is left
// held there, as real Redis shows (DBSIZE), whether the master ran again
// within lateBound or after it.
func TestLane_lateGrantsAreRolledBack(t *testing.T) {
	for _, pause := range []time.Duration{400 * time.Millisecond, 2500 * time.Millisecond} {
		for _, on := range []bool{false, true} {
			t.Run(fmt.Sprintf("pause=%v/ContextTimeoutEnabled=%v", pause, on), func(t *testing.T) {
				servers := []*server{startServer(t), startServer(t), startServer(t)}
				var clients []redis.UniversalClient
				for _, s := range servers {
					clients = append(clients, newClient(t, s, withLaneContext(on)))
				}
				rc, err := New(clients, redlock.WithTimeout(100*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				defer rc.Close()
				ctx := context.Background()
				l, err := rc.TryAcquire(ctx, "hung:warm", redlock.WithTTL(30*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				servers[0].stop()
				servers[1].stop()
				defer servers[0].cont()
				defer servers[1].cont()
				for i := 0; i < 5; i++ {
					if _, err := rc.TryAcquire(ctx, fmt.Sprint("hung:k", i), redlock.WithTTL(30*time.Second)); err == nil {
						t.Fatal("acquired with two masters of three stopped")
					}
				}
				time.Sleep(pause) // the subject: masters hung for this long
				servers[0].cont()
				servers[1].cont()
				var checks []*redis.Client
				for _, s := range servers {
					checks = append(checks, newClient(t, s))
				}
				held := func() int {
					n := 0
					for _, cl := range checks {
						k, err := cl.DBSize(ctx).Result()
						if err != nil {
							t.Fatal(err)
						}
						n += int(k)
					}
					return n
				}
				// within 15 s of the masters running again (TTL 30 s)
				waitForWithin(t, 15*time.Second, "no key held once the masters ran again", func() bool { return held() == 0 })
			})
		}
	}
}
