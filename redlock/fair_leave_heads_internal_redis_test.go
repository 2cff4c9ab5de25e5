package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// holdUnannounced puts a holder's key at key on every master, as a plain
// holder that never releases would; dropUnannounced takes it away as its
// expiry does: nothing is published.
func holdUnannounced(t *testing.T, servers []*redistest.Server, key string) {
	t.Helper()
	for _, s := range servers {
		if _, err := s.Do("SET", key, "holder", "PX", 60000); err != nil {
			t.Fatal(err)
		}
	}
}

func dropUnannounced(t *testing.T, servers []*redistest.Server, key string) {
	t.Helper()
	for _, s := range servers {
		if _, err := s.Do("DEL", key); err != nil {
			t.Fatal(err)
		}
	}
}

// waitMore waits, bounded, until n has grown by one past from.
func waitMore(t *testing.T, what string, n interface{ Load() int64 }, from int64) {
	t.Helper()
	if !redistest.WaitFor(ctx5s(t), func() bool { return n.Load() > from }) {
		t.Fatalf("%s: %d pauses, want more than %d", what, n.Load(), from)
	}
}

// Three fair waiters that head the queue in turn (W1, W2 in client D, W3
// in client C) give up at the same moment, on a key that became free
// unannounced. Their leaves reach each master in any order; whichever
// removes the head last announces it, so B (client C, behind W3 in C's own
// queue), first once they are gone, must be woken: no client's clock runs,
// so a waiter not woken sleeps on. G (client D, last) then gets the key at
// B's release, and nothing of the lock is left on any master. Three
// rounds per N, on both connection paths (D pooled, C pipelined).
func TestFair_headsGivingUpTogetherWakeTheWaiterLeft(t *testing.T) {
	redistest.SkipShort(t)
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			servers := redistest.Start(t, n)
			base := time.Unix(1_700_000_000, 0)
			fd := clock.NewFake(base)                  // W1, W2, and G much later
			fc := clock.NewFake(base.Add(time.Second)) // W3, then B
			d := leadClient(t, servers, false, WithClock(fd), WithTimeout(realTimeoutIn))
			c := leadClient(t, servers, true, WithClock(fc), WithTimeout(realTimeoutIn))
			inD, inC := settledCount(d), settledCount(c)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for round := 0; round < 3; round++ {
				key := fmt.Sprintf("fair:together:%d", round)
				holdUnannounced(t, servers, key)
				gctx, giveUp := context.WithCancel(ctx)
				var quit []<-chan *Lock
				at := inD.Load()
				quit = append(quit, fairWaiter(gctx, d, key))
				waitMore(t, "W1 waits", inD, at)
				fd.Advance(time.Millisecond)
				at = inD.Load()
				quit = append(quit, fairWaiter(gctx, d, key))
				waitMore(t, "W2 waits", inD, at)
				at = inC.Load()
				quit = append(quit, fairWaiter(gctx, c, key))
				waitMore(t, "W3 waits", inC, at)
				fc.Advance(time.Millisecond)
				at = inC.Load()
				b := fairWaiter(ctx, c, key)
				waitMore(t, "B waits", inC, at)
				fd.Advance(10 * time.Second) // G arrives after B
				at = inD.Load()
				g := fairWaiter(ctx, d, key)
				waitMore(t, "G waits", inD, at)

				dropUnannounced(t, servers, key)
				start := time.Now()
				giveUp()
				for i, q := range quit {
					if l := <-q; l != nil {
						t.Fatalf("W%d got the lock after giving up", i+1)
					}
				}
				var lb *Lock
				select {
				case lb = <-b:
					if lb == nil {
						t.Fatal("B failed")
					}
				case lg := <-g:
					t.Fatalf("G got the lock before B (%v)", lg != nil)
				case <-time.After(5 * time.Second):
					t.Fatalf("round %d: B, first once W1..W3 left, was not woken: the key stayed free", round)
				}
				took := time.Since(start)
				if err := lb.Release(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case lg := <-g:
					if lg == nil {
						t.Fatal("G failed")
					}
					if err := lg.Release(ctx); err != nil {
						t.Fatal(err)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("round %d: G was not woken by B's release", round)
				}
				t.Logf("round %d: B got the key %v after the three gave up", round, took)
				leftover.None(t, servers, key)
			}
		})
	}
}

// N=3 with one master stopped (SIGSTOP) while the head X gives up on a
// free key: the two masters that run X's leave announce it, and B, first
// there, gets the lock on them (at once unless its woken attempt reached
// a master before the leave did). Once the
// master resumes and runs what waited for it (X's late leave, B's late
// attempt, B's release), nothing of the lock is left on any master, and a
// fair waiter after B gets the key.
func TestFair_headLeavingWhileAMasterIsStoppedWakesTheNext(t *testing.T) {
	redistest.SkipShort(t)
	for _, stopped := range []int{0, 2} {
		t.Run(fmt.Sprintf("stopped=%d", stopped), func(t *testing.T) {
			servers := redistest.Start(t, 3)
			fd := clock.NewFake(time.Unix(1_700_000_000, 0))
			fc := clock.NewFake(time.Unix(1_700_000_001, 0))
			// A leave a running master did not answer in time is not sent
			// again: its entry heads the queue to its deadline, and B, on a
			// clock that does not run, sleeps past it. A per-master timeout
			// of 2 s keeps a busy machine from failing the leaves.
			d := leadClient(t, servers, stopped == 0, WithClock(fd), WithTimeout(2*time.Second))
			c := leadClient(t, servers, stopped != 0, WithClock(fc), WithTimeout(2*time.Second))
			inD, inC := settledCount(d), settledCount(c)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const key = "fair:stopped"
			holdUnannounced(t, servers, key)
			xctx, giveUp := context.WithCancel(ctx)
			defer giveUp()
			x := fairWaiter(xctx, d, key)
			waitCount(t, "X waits", inD, 1)
			b := fairWaiter(ctx, c, key)
			waitCount(t, "B waits", inC, 1)
			dropUnannounced(t, servers, key)

			s := servers[stopped]
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			resumed := false
			resume := func() {
				if !resumed {
					resumed = true
					if err := s.Resume(); err != nil {
						t.Error(err)
					}
				}
			}
			defer resume()
			start := time.Now()
			giveUp()
			if lx := <-x; lx != nil {
				t.Fatal("X got the lock after giving up")
			}
			// X's leave and B's woken attempt race on each running master:
			// where the attempt came first it was refused (X still headed
			// the queue there), and its round waits for the stopped master
			// on C's clock, which does not run. Once the leave has run on
			// both running masters, B gets a bounded while to come; if it
			// does not, and is in such an attempt, C's clock is moved past
			// the round's wait and then past B's backoff, as time would
			// have passed.
			if !redistest.WaitFor(ctx5s(t), func() bool {
				for i, s := range servers {
					if i == stopped {
						continue
					}
					if n, err := redis.Int(s.Do("ZCARD", keys.Companion(key, keys.QueueSuffix))); err != nil || n > 1 {
						return false
					}
				}
				return true
			}) {
				t.Fatal("X's leave did not run on the masters running")
			}
			// B's attempt that lost the race holds the key on a running
			// master while it waits for the stopped one; a B no notice
			// woke holds it nowhere, and no clock is moved for it.
			heldOnARunningMaster := func() bool {
				for i, s := range servers {
					if i != stopped && exists(t, s, key) {
						return true
					}
				}
				return false
			}
			var lb *Lock
			moves := []time.Duration{0, c.timeout + time.Millisecond, time.Minute + time.Millisecond} // the round's wait, then B's backoff (fairWaiter)
			for step, move := range moves {
				fc.Advance(move)
				select {
				case lb = <-b:
					if lb == nil {
						t.Fatal("B failed")
					}
				case <-time.After(time.Duration(1+step) * time.Second):
				}
				if lb != nil || step == len(moves)-1 {
					break
				}
				if step == 0 && !heldOnARunningMaster() {
					// B is not in an attempt: no notice woke it.
					t.Fatal("B, first on the masters running, was not woken by X's leave")
				}
				t.Logf("B has not come %v after X's leave ran; moving C's clock", time.Since(start))
			}
			if lb == nil {
				for i, s := range servers {
					if i != stopped {
						ks, _ := redis.Strings(s.Do("KEYS", "*"))
						t.Logf("master %d: %q", i, ks)
					}
				}
				t.Fatal("B, first on the masters running, did not get the lock after X's leave")
			}
			t.Logf("B got the key %v after X gave up, master %d stopped", time.Since(start), stopped)
			resume()
			fd.Advance(time.Minute) // E arrives after B (X's place was D's)
			e := fairWaiter(ctx, d, key)
			if err := lb.Release(ctx); err != nil {
				t.Fatal(err)
			}
			getsIt(ctx, t, "E, after B's release,", e)
			leftover.None(t, servers, key)
		})
	}
}

// Fair waiters of four clients (both paths) on N=3 masters take one key
// in turn while half of them give up after a few milliseconds, each
// perhaps while it heads the queue of a free key, so that their leaves
// announce it: never two holders at once, every patient waiter gets the
// key each time it asks, and nothing of the lock is left.
func TestFair_waitersGivingUpAtRandomKeepExclusionAndLeaveNothing(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 3)
	var clients []*Client
	for i := 0; i < 4; i++ {
		clients = append(clients, leadClient(t, servers, i%2 == 0, WithTimeout(realTimeoutIn)))
	}
	const key = "fair:random"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var holders, overlaps, got, gaveUp atomic.Int32
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < 12; i++ {
		patient := i%2 == 0
		c := clients[i%len(clients)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 4; j++ {
				wait := 10 * time.Second
				if !patient {
					wait = time.Duration(2+(i*7+j*13)%20) * time.Millisecond
				}
				l, err := c.Acquire(ctx, key, WithFair(), WithTTL(5*time.Second), WithWait(wait))
				if err != nil {
					if patient {
						errs <- fmt.Errorf("patient waiter %d, lock %d: %w", i, j, err)
						return
					}
					gaveUp.Add(1)
					continue
				}
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				got.Add(1)
				time.Sleep(time.Millisecond) // the subject: the work under the lock
				holders.Add(-1)
				if err := l.Release(ctx); err != nil {
					errs <- fmt.Errorf("waiter %d release: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if overlaps.Load() != 0 {
		t.Fatalf("%d acquisitions found another holder", overlaps.Load())
	}
	t.Logf("%d locks taken, %d gave up, in %v", got.Load(), gaveUp.Load(), time.Since(start))
	leftover.None(t, servers, key)
}
