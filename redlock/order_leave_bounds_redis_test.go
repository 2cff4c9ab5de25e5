package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// A client's acquisition that starts a chain waits, on each master, for
// the client's newest leave of the key still in flight. These tests bound
// that wait: a leave stuck on a stopped master, a leave a master never
// takes, the caller's ctx and Close during the wait, waiters of one client
// that give up while others of it wait, leaves racing with releases.

// noRoundsLeft waits until the client tracks no round (Sizes).
func noRoundsLeft(t *testing.T, c *redlock.Client) {
	t.Helper()
	waitUntil(t, "no round of the client tracked", func() bool {
		n, _, _ := c.Sizes()
		return n == 0
	})
}

// A leave stuck on a stopped master (behind the waiter's own attempts
// there) must not slow the client's next acquisition of the key: it wins
// the two running masters at once, its leg to the stopped one waiting
// apart. The waiter that gave up waited (WithWait), so several of its
// attempts are queued on the stopped master before the leave.
func TestOrder_leaveStuckOnAStoppedMasterDoesNotSlowTheNextAcquisition(t *testing.T) {
	const timeout = 500 * time.Millisecond
	for _, tc := range leaveCases() {
		for _, waited := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/waited=%v", tc.name, waited), func(t *testing.T) {
				rs := startReal(t, 3)
				ctx := ctxT(t)
				key := "leave-stuck"
				c := rs.client(t, pooledPath, redlock.WithTimeout(timeout))
				if _, err := c.Inspect(ctx, "warm-up"); err != nil {
					t.Fatal(err)
				}
				for _, s := range rs.servers {
					if _, err := s.Run(tc.put(key)); err != nil {
						t.Fatal(err)
					}
				}
				rs.pause(t, 2)
				first := tc.first
				if waited {
					first = func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
						ctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
						defer cancel()
						if tc.name == "fair after a fair waiter gave up" {
							return c.Acquire(ctx, key, redlock.WithFair())
						}
						return c.AcquireWrite(ctx, key)
					}
				}
				if _, err := first(ctx, c, key); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("the first attempt, on a held key: %v", err)
				}
				for _, s := range rs.servers[:2] {
					if _, err := s.Run(tc.take(key)); err != nil {
						t.Fatal(err)
					}
				}
				start := time.Now()
				l, err := tc.next(ctx, c, key)
				took := time.Since(start)
				t.Logf("next acquisition took %v (err %v)", took, err)
				if err != nil {
					t.Fatalf("the next acquisition, with masters 0 and 1 free: %v", err)
				}
				if took > timeout {
					t.Errorf("the next acquisition took %v, more than a per-master timeout (%v), with two masters running and free", took, timeout)
				}
				if err := rs.servers[2].Resume(); err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				noRoundsLeft(t, c)
			})
		}
	}
}

// leaveJail holds every leave of key on a proxied master until freed (or
// the connection quits); everything else passes.
type leaveJail struct {
	key  string
	free chan struct{}
	held atomic.Int32
}

func (j *leaveJail) hook(c *hostile.Conn, cmd []string) hostile.Verdict {
	if !isLeave(cmd, j.key) {
		return hostile.Forward
	}
	j.held.Add(1)
	select {
	case <-j.free:
		return hostile.Forward
	case <-c.Quit():
		return hostile.HangUp
	}
}

// jailedClient is a pooled client of three masters, the leaves of key
// held on masters 1 and 2 (proxies), whose first writer of key gave up
// against another client's reader: its leave is held, the reader gone.
func jailedClient(t *testing.T, key string, timeout time.Duration) (*redlock.Client, *leaveJail) {
	t.Helper()
	rs := startReal(t, 3)
	ctx := ctxT(t)
	j := &leaveJail{key: key, free: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-j.free:
		default:
			close(j.free)
		}
	})
	addrs := []string{rs.servers[0].Addr()}
	for _, s := range rs.servers[1:] {
		addrs = append(addrs, hostile.NewProxy(t, s.Addr(), j.hook).Addr())
	}
	c := addrClient(t, pooledPath, addrs, redlock.WithTimeout(timeout))
	other := rs.client(t, pooledPath)
	if _, err := c.Inspect(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	release, err := releaser(other.TryAcquireRead(ctx, key))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquireWrite(ctx, key); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("the first writer, on a read-held key: %v", err)
	}
	waitUntil(t, "the leave held on masters 1 and 2", func() bool { return j.held.Load() >= 2 })
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	return c, j
}

// While the client's leave is held unanswered on two masters of three,
// the next acquisition's wait for it ends with the caller's ctx, and
// without one within the round's own bound; nothing is left tracked once
// the leave's legs end.
func TestOrder_waitForTheLeaveEndsWithCtxAndTheRoundsBound(t *testing.T) {
	const timeout = 500 * time.Millisecond
	key := "leave-jailed"
	c, j := jailedClient(t, key, timeout)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.TryAcquireWrite(ctx, key)
	took := time.Since(start)
	t.Logf("with a 100ms ctx: %v after %v", err, took)
	if err == nil {
		t.Fatal("acquired while the client's own intent stayed on two masters")
	}
	if took > 100*time.Millisecond+timeout/2 {
		t.Errorf("the acquisition with a 100ms ctx returned after %v", took)
	}

	start = time.Now()
	_, err = c.TryAcquireWrite(context.Background(), key)
	took = time.Since(start)
	t.Logf("without a ctx deadline: %v after %v", err, took)
	if took > 3*timeout {
		t.Errorf("the acquisition without a ctx deadline returned after %v, past its bound", took)
	}
	close(j.free)
	noRoundsLeft(t, c)
	l, err := c.TryAcquireWrite(ctxT(t), key)
	if err != nil {
		t.Fatalf("once the leaves ran: %v", err)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	noRoundsLeft(t, c)
}

// Close while an acquisition waits for the client's leave held on two
// masters: the acquisition returns, Close returns within its grace, and
// no goroutine is left (goleak, TestMain).
func TestOrder_closeEndsAnAcquisitionWaitingForTheLeave(t *testing.T) {
	const timeout = 2 * time.Second // the wait outlasts the Close
	key := "leave-close"
	c, _ := jailedClient(t, key, timeout)
	done := make(chan error, 1)
	go func() {
		_, err := c.TryAcquireWrite(context.Background(), key)
		done <- err
	}()
	waitUntil(t, "the acquisition's round tracked", func() bool {
		n, _, _ := c.Sizes()
		return n >= 2 // the leave and the acquisition
	})
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	t.Logf("Close took %v", time.Since(start))
	select {
	case err := <-done:
		t.Logf("the waiting acquisition: %v after %v", err, time.Since(start))
		if err == nil {
			t.Error("acquired while the client's own intent stayed on two masters")
		}
	case <-time.After(3 * timeout):
		t.Fatal("the acquisition waiting for the leave did not return after Close")
	}
}

// A master that is known down takes no leave (its round never sends
// there) and no acquisition: the next acquisition wins the two others at
// once, and nothing stays tracked.
func TestOrder_leaveToAMasterKnownDownDoesNotHoldTheNextAcquisition(t *testing.T) {
	const timeout = 500 * time.Millisecond
	for _, tc := range leaveCases() {
		t.Run(tc.name, func(t *testing.T) {
			rs := startReal(t, 3)
			ctx := ctxT(t)
			key := "leave-down"
			c := rs.client(t, pooledPath, redlock.WithTimeout(timeout))
			if _, err := c.Inspect(ctx, "warm-up"); err != nil {
				t.Fatal(err)
			}
			for _, s := range rs.servers[:2] {
				if _, err := s.Run(tc.put(key)); err != nil {
					t.Fatal(err)
				}
			}
			if err := rs.servers[2].Kill(); err != nil {
				t.Fatal(err)
			}
			if _, err := tc.first(ctx, c, key); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("the first attempt, on a held key: %v", err)
			}
			for _, s := range rs.servers[:2] {
				if _, err := s.Run(tc.take(key)); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			l, err := tc.next(ctx, c, key)
			took := time.Since(start)
			t.Logf("next acquisition took %v", took)
			if err != nil {
				t.Fatalf("the next acquisition, with masters 0 and 1 free: %v", err)
			}
			if took > timeout {
				t.Errorf("the next acquisition took %v with master 2 down", took)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			noRoundsLeft(t, c)
		})
	}
}

// A client's reader lets go while its writer of the same key gives up
// (refused by that reader): the release and the leave are in flight
// together, and the client's next writer follows both, winning a key no
// one holds, every time.
func TestOrder_nextWriterFollowsARaceOfReleaseAndLeave(t *testing.T) {
	rs := startReal(t, 3)
	ctx := ctxT(t)
	c := rs.client(t, pooledPath)
	for i := range 30 {
		key := fmt.Sprintf("leave-race-%d", i)
		r, err := c.TryAcquireRead(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			// Refused by the reader (and leaving), or the winner where the
			// release ran first on a quorum.
			w, err := c.TryAcquireWrite(ctx, key)
			switch {
			case err == nil:
				if err := w.Release(ctx); err != nil {
					t.Errorf("run %d: %v", i, err)
				}
			case !errors.Is(err, redlock.ErrNotAcquired):
				t.Errorf("run %d: the writer: %v", i, err)
			}
		}()
		go func() {
			defer wg.Done()
			if err := r.Release(ctx); err != nil {
				t.Errorf("run %d: the reader's release: %v", i, err)
			}
		}()
		wg.Wait()
		w, err := c.TryAcquireWrite(ctx, key)
		if err != nil {
			t.Fatalf("run %d: the next writer, on a key no one holds: %v", i, err)
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	noRoundsLeft(t, c)
}

// Two waiters of one client wait on one key held by another client; the
// first gives up (its leave runs while the second still waits). Once the
// holder lets go the second gets the key, while another client is still
// refused; fair waiters get it in the order they came.
func TestOrder_waiterOfTheClientGetsTheKeyAfterAnotherOfItGaveUp(t *testing.T) {
	type kindCase struct {
		name          string
		hold, acquire func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error)
		try           func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error)
		marked        func(t *testing.T, do func(string, ...any) (any, error), key string) bool
	}
	cases := []kindCase{
		{
			name: "writers",
			hold: func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
				return c.TryAcquireRead(ctx, key)
			},
			acquire: func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
				return c.AcquireWrite(ctx, key)
			},
			try: func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
				return c.TryAcquireWrite(ctx, key)
			},
			marked: func(t *testing.T, do func(string, ...any) (any, error), key string) bool {
				n, err := redis.Int(do("HEXISTS", key, "intent"))
				if err != nil {
					t.Fatal(err)
				}
				return n == 1
			},
		},
		{
			name: "fair waiters",
			hold: func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
				return c.TryAcquire(ctx, key, redlock.WithFair())
			},
			acquire: func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
				return c.Acquire(ctx, key, redlock.WithFair())
			},
			try: func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
				return c.TryAcquire(ctx, key, redlock.WithFair())
			},
			marked: func(t *testing.T, do func(string, ...any) (any, error), key string) bool {
				n, err := redis.Int(do("ZCARD", layout.QueueKey(key)))
				if err != nil {
					t.Fatal(err)
				}
				return n > 0
			},
		},
	}
	for _, kc := range cases {
		t.Run(kc.name, func(t *testing.T) {
			for run := range 5 {
				rs := startReal(t, 3)
				ctx := ctxT(t)
				key := "leave-two-waiters"
				c := rs.client(t, pooledPath)
				other := rs.client(t, pooledPath)
				third := rs.client(t, pooledPath)
				held, err := kc.hold(ctx, other, key)
				if err != nil {
					t.Fatal(err)
				}
				quitter, cancel := context.WithCancel(ctx)
				gaveUp := make(chan error, 1)
				go func() {
					_, err := kc.acquire(quitter, c, key)
					gaveUp <- err
				}()
				// The second waiter comes once the first has left its mark
				// (intent or queue entry) on a master; the first gives up
				// 300 ms later, the second waiting meanwhile. (A give-up
				// timed from the start could come, on a busy host, before
				// the mark was seen, and take it away.)
				waitUntil(t, "the first waiter's mark", func() bool {
					select {
					case err := <-gaveUp:
						t.Fatalf("run %d: the first waiter returned before it left a mark: %v", run, err)
					default:
					}
					for _, s := range rs.servers {
						if kc.marked(t, s.Do, key) {
							return true
						}
					}
					return false
				})
				giveUp := time.AfterFunc(300*time.Millisecond, cancel)
				defer giveUp.Stop()
				got := make(chan *redlock.Lock, 1)
				errs := make(chan error, 1)
				go func() {
					l, err := kc.acquire(ctx, c, key)
					if err != nil {
						errs <- err
						return
					}
					got <- l
				}()
				if err := <-gaveUp; !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("run %d: the first waiter: %v", run, err)
				}
				cancel()
				start := time.Now()
				if err := held.Release(ctx); err != nil {
					t.Fatal(err)
				}
				var l *redlock.Lock
				select {
				case l = <-got:
				case err := <-errs:
					t.Fatalf("run %d: the second waiter: %v", run, err)
				case <-time.After(5 * time.Second):
					t.Fatalf("run %d: the second waiter did not get the key within 5s of its release", run)
				}
				t.Logf("run %d: second waiter got the key %v after the release", run, time.Since(start))
				if x, err := kc.try(ctx, third, key); err == nil {
					_ = x.Release(ctx)
					t.Fatalf("run %d: another client acquired the key the second waiter holds", run)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				noRoundsLeft(t, c)
			}
		})
	}
}

// Waiters of two clients hand a fair key around, each giving up now and
// then (short waits): never two holders at once, and each client's
// bookkeeping returns to nothing.
func TestOrder_fairHandoverWithLeavesExcludes(t *testing.T) {
	rs := startReal(t, 3)
	ctx := ctxT(t)
	key := "leave-handover"
	clients := []*redlock.Client{rs.client(t, pooledPath), rs.client(t, pooledPath)}
	var holders atomic.Int32
	var got, gaveUp atomic.Int32
	var wg sync.WaitGroup
	end := time.Now().Add(3 * time.Second)
	for w := range 6 {
		c := clients[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				wait := 30 * time.Millisecond
				if w%3 == 0 {
					wait = 300 * time.Millisecond
				}
				l, err := c.Acquire(ctx, key, redlock.WithFair(), redlock.WithWait(wait), redlock.WithTTL(5*time.Second))
				if err != nil {
					if !errors.Is(err, redlock.ErrNotAcquired) {
						t.Error(err)
						return
					}
					gaveUp.Add(1)
					continue
				}
				got.Add(1)
				if n := holders.Add(1); n > 1 {
					t.Errorf("%d holders of the fair key at once", n)
				}
				holders.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("acquired %d, gave up %d", got.Load(), gaveUp.Load())
	if got.Load() == 0 {
		t.Error("no waiter ever got the key")
	}
	for _, c := range clients {
		noRoundsLeft(t, c)
	}
	waitUntil(t, "nothing of the key left", func() bool {
		for _, s := range rs.servers {
			n, err := redis.Int(s.Do("EXISTS", key))
			if err != nil || n != 0 {
				return false
			}
		}
		return true
	})
}
