package redlock_test

// The ordering per holder on each master, Close, and the wake-ups of
// waiters.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// fakeClockWaiters returns a client on rs whose timers never fire (a fake
// clock nobody advances): its waiters can only be woken by a notice.
func fakeClockWaiters(t *testing.T, path connPath, rs *realSet) (*redlock.Client, *clock.Fake) {
	t.Helper()
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	return rs.client(t, path, redlock.WithClock(fake)), fake
}

// waitReaders starts n AcquireRead calls on c and returns the channel on
// which each reports its lock (nil on failure, reported with t.Error).
func waitReaders(ctx context.Context, t *testing.T, c *redlock.Client, key string, n int) <-chan *redlock.Lock {
	got := make(chan *redlock.Lock, n)
	for i := 0; i < n; i++ {
		go func() {
			l, err := c.AcquireRead(ctx, key, redlock.WithWait(time.Hour), redlock.WithTTL(time.Minute))
			if err != nil {
				t.Errorf("reader %d: %v", i, err)
			}
			got <- l
		}()
	}
	return got
}

// waitForWaiters waits until key's channel has subs subscribers on every
// master and the fake clock has exactly n timers, steadily: n waiters
// that made their first attempt and wait, each with its timer armed.
func waitForWaiters(t *testing.T, rs *realSet, fake *clock.Fake, key string, subs, n int) {
	t.Helper()
	steady := 0
	waitUntil(t, fmt.Sprintf("%d waiters wait, subscribed on every master", n), func() bool {
		ok := fake.Pending() == n
		for i := range rs.servers {
			ok = ok && numSub(t, rs, i, "quorumlock:released:"+key) == subs
		}
		if !ok {
			steady = 0
			return false
		}
		steady++
		time.Sleep(20 * time.Millisecond) // the subject: the count holds steady for 100 ms
		return steady >= 5
	})
}

// collectReaders waits for n readers' locks and releases them.
func collectReaders(t *testing.T, got <-chan *redlock.Lock, n int, what string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case l := <-got:
			if l == nil {
				t.FailNow()
			}
			defer l.Release(context.Background())
		case <-deadline:
			t.Fatalf("%s: only %d of %d waiting readers got the read lock; the others were never woken", what, i, n)
		}
	}
}

// Readers share the lock: when a writer releases, every reader waiting in
// a client must get in, not only the one or two that the release's
// notices woke. Readers whose timers never fire can only be woken, so
// those the notices did not reach would wait for their fallback poll (up
// to 2 s) although the key is free for them.
func TestWake_writerReleaseWakesEveryWaitingReader(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			wl, err := rs.client(t, path).AcquireWrite(ctx, "doc", redlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			c, fake := fakeClockWaiters(t, path, rs)
			const readers = 5
			got := waitReaders(ctx, t, c, "doc", readers)
			waitForWaiters(t, rs, fake, "doc", 1, readers)
			if err := wl.Release(ctx); err != nil {
				t.Fatal(err)
			}
			collectReaders(t, got, readers, "after the writer's release")
		})
	})
}

// A writer that gives up withdraws its intent, which let new readers in
// again: the readers it turned away must hear of it rather than sleep
// until their fallback poll.
func TestWake_writerThatGivesUpWakesReaders(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			r0, err := rs.client(t, path).AcquireRead(ctx, "doc", redlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer r0.Release(context.Background())
			// AcquireRead returns at a quorum: a master that had not yet run
			// the read would grant the writer (and keep no intent) on every
			// attempt, rolled back each time.
			waitUntil(t, "every master has the reader", func() bool {
				return count(rs.hget(t, "doc", "r:"+r0.Token()), "") == 0
			})
			wctx, giveUp := context.WithCancel(ctx)
			defer giveUp()
			wrote := make(chan error, 1)
			go func() {
				_, err := rs.client(t, path).AcquireWrite(wctx, "doc", redlock.WithWait(time.Hour))
				wrote <- err
			}()
			waitUntil(t, "the writer's intent is set", func() bool {
				return count(rs.hget(t, "doc", "intent"), "") == 0
			})
			c, fake := fakeClockWaiters(t, path, rs)
			const readers = 3
			got := waitReaders(ctx, t, c, "doc", readers)
			waitForWaiters(t, rs, fake, "doc", 2, readers) // the writer's client subscribed too
			giveUp()
			if err := <-wrote; !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("writer: %v", err)
			}
			collectReaders(t, got, readers, "after the writer gave up")
		})
	})
}

// pauser freezes one master at a time (SIGSTOP), for each of frozen in
// turn, then lets it run for running, until stop is called; stop resumes
// it.
func pauser(t *testing.T, rs *realSet, frozen []time.Duration, running time.Duration) (stop func()) {
	t.Helper()
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			s := rs.servers[i%len(rs.servers)]
			if err := s.Pause(); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-quit:
			case <-time.After(frozen[i%len(frozen)]):
			}
			if err := s.Resume(); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-quit:
				return
			case <-time.After(running):
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}

// Two reentrant owners on two clients, each shared by goroutines that
// take and give back holds over and over, while one master at a time is
// frozen: the owners never hold the lock at once, the per-holder chains
// drain when the traffic stops, and a third owner can then take the lock.
func TestReentrant_ownersExcludeUnderFrozenMasters(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		var mu sync.Mutex
		inside := map[string]int{} // holds taken and not yet given back, per owner
		var acquired, refused, failed atomic.Int64
		// Short freezes, and some longer than the pipelined connection's
		// stall timeout (1.5 s here), which then breaks and is dialed anew.
		stop := pauser(t, rs, []time.Duration{300 * time.Millisecond, 300 * time.Millisecond, 1700 * time.Millisecond}, 300*time.Millisecond)
		defer stop()
		var wg sync.WaitGroup
		end := time.Now().Add(6 * time.Second)
		clients := make([]*redlock.Client, 2)
		for o, owner := range []string{"owner-a", "owner-b"} {
			c := rs.client(t, path, redlock.WithTimeout(150*time.Millisecond))
			clients[o] = c
			r, err := c.NewReentrant("k", owner, redlock.WithTTL(time.Minute), redlock.WithWait(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			other := "owner-b"
			if o == 1 {
				other = "owner-a"
			}
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(end) {
						err := r.Acquire(context.Background())
						if err != nil {
							if errors.Is(err, redlock.ErrNotAcquired) {
								refused.Add(1)
							} else {
								failed.Add(1)
								t.Logf("%s acquire: %v", owner, err)
							}
							continue
						}
						acquired.Add(1)
						mu.Lock()
						if inside[other] > 0 {
							t.Errorf("%s got the lock while %s holds it %d times", owner, other, inside[other])
						}
						inside[owner]++
						mu.Unlock()
						time.Sleep(time.Millisecond) // the subject: a hold long enough for an overlap to show
						mu.Lock()
						inside[owner]--
						mu.Unlock()
						for {
							err := r.Release(context.Background())
							if err == nil || errors.Is(err, redlock.ErrNotHeld) || errors.Is(err, redlock.ErrLockLost) {
								break
							}
							// Not confirmed by a quorum (a frozen master,
							// and one that missed the hold while it was
							// frozen before): the hold is still counted;
							// give it back again.
							failed.Add(1)
							t.Logf("%s release: %v", owner, err)
							time.Sleep(20 * time.Millisecond)
						}
					}
				}()
			}
		}
		wg.Wait()
		stop()
		t.Logf("%d holds taken, %d waits gave up, %d other failures", acquired.Load(), refused.Load(), failed.Load())
		if acquired.Load() < 20 {
			t.Errorf("only %d holds taken in 6 s", acquired.Load())
		}
		for i, c := range clients {
			waitUntil(t, fmt.Sprintf("client %d's rounds drained", i), func() bool {
				releasing, waited, _ := c.Sizes()
				return releasing == 0 && waited == 0
			})
		}
		third, err := rs.client(t, path).NewReentrant("k", "owner-c", redlock.WithWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := third.Acquire(ctxT(t)); err != nil {
			t.Fatalf("a third owner after both gave every hold back: %v (masters hold %q / %q)",
				err, rs.hget(t, "k", "owner-a"), rs.hget(t, "k", "owner-b"))
		}
		_ = third.Release(context.Background())
	})
}

// Close while many holders' rounds are chained behind commands pending
// on a frozen master returns within a bound (on the pooled path a few
// per-master timeouts: the oldest command's read, which runs one timeout
// past its deadline once its master is silent, and its rollback's; on
// the pipelined path the connection's stall timeout, ten per-master
// timeouts, fails what is pending), and every call returns.
func TestClose_roundsChainedOnAFrozenMaster(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		const timeout = 200 * time.Millisecond
		rs := startReal(t, 3)
		c, err := redigo.New(rs.pools, redlock.WithTimeout(timeout), path.Option())
		if err != nil {
			t.Fatal(err)
		}
		// Connected to every master first, so that commands queue on the
		// frozen one's connection rather than fail at its dial.
		l, err := c.Acquire(context.Background(), "warm")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := rs.servers[2].Pause(); err != nil {
			t.Fatal(err)
		}
		defer rs.servers[2].Resume()
		var wg sync.WaitGroup
		var ops atomic.Int64
		for g := 0; g < 8; g++ {
			wg.Add(2)
			go func() { // a reentrant owner taking and giving back holds
				defer wg.Done()
				r, err := c.NewReentrant(fmt.Sprintf("r%d", g%2), fmt.Sprintf("owner-%d", g), redlock.WithWait(300*time.Millisecond))
				if err != nil {
					t.Error(err)
					return
				}
				for {
					if err := r.Acquire(context.Background()); errors.Is(err, redlock.ErrClosed) {
						return
					}
					ops.Add(1)
					if err := r.Acquire(context.Background()); errors.Is(err, redlock.ErrClosed) {
						return
					}
					for r.Count() > 0 {
						if err := r.Release(context.Background()); errors.Is(err, redlock.ErrClosed) {
							return
						}
					}
				}
			}()
			go func() { // plain locks, some of them fair or fenced
				defer wg.Done()
				opts := [][]redlock.LockOption{nil, {redlock.WithFair()}, {redlock.WithFencing()}}[g%3]
				for j := 0; ; j++ {
					l, err := c.Acquire(context.Background(), fmt.Sprintf("p%d", j%3), append(opts, redlock.WithWait(300*time.Millisecond))...)
					if errors.Is(err, redlock.ErrClosed) {
						return
					}
					ops.Add(1)
					if err == nil {
						if err := l.Extend(context.Background(), 5*time.Second); errors.Is(err, redlock.ErrClosed) {
							return
						}
						_ = l.Release(context.Background())
					}
				}
			}()
		}
		time.Sleep(1500 * time.Millisecond) // the subject: traffic on the frozen master before Close
		start := time.Now()
		c.Close()
		took := time.Since(start)
		returned := make(chan struct{})
		go func() { wg.Wait(); close(returned) }()
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Fatal("calls still running 10 s after Close")
		}
		bound := 6 * timeout // two per-master timeouts, and margin for a loaded machine
		if path.pipelined {
			bound = 10*timeout + 4*timeout // the stall timeout, and margin
		}
		t.Logf("%d operations; Close took %v", ops.Load(), took)
		if took > bound {
			t.Errorf("Close took %v with a frozen master, want at most %v", took, bound)
		}
		if releasing, waited, conns := c.Sizes(); releasing != 0 || waited != 0 || conns != 0 {
			t.Errorf("after Close: %d rounds tracked, %d keys waited for, %d connections", releasing, waited, conns)
		}
	})
}

// Close ends the waits of Acquire calls in progress: they return
// ErrClosed at once rather than sleep until their next timer (a backoff,
// a fallback poll of up to 2 s; here a fake clock that never fires), and
// the pools get back every connection, a plain *redis.Pool included.
func TestClose_endsWaitingAcquires(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*redis.Pool) pool.Pool
	}{
		{"redis.Pool", func(p *redis.Pool) pool.Pool { return p }},
		{"own pool", func(p *redis.Pool) pool.Pool { return plainPool{p} }},
		{"pipelined", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := startReal(t, 3)
			holder := rs.client(t, pipelinedPath)
			for k := 0; k < 3; k++ {
				if _, err := holder.Acquire(context.Background(), fmt.Sprintf("k%d", k), redlock.WithTTL(time.Minute)); err != nil {
					t.Fatal(err)
				}
			}
			for try := 0; try < 4; try++ {
				pools := rs.pools
				var plain []*redis.Pool
				if tc.wrap != nil {
					pools = make([]pool.Pool, len(rs.servers))
					for i, s := range rs.servers {
						rp := &redis.Pool{MaxIdle: 4, DialContext: func(ctx context.Context) (redis.Conn, error) {
							return redis.DialContext(ctx, "tcp", s.Addr())
						}}
						defer rp.Close()
						plain = append(plain, rp)
						pools[i] = tc.wrap(rp)
					}
				}
				fake := clock.NewFake(time.Unix(1_700_000_000, 0))
				c, err := redigo.New(pools, redlock.WithTimeout(realTimeout), redlock.WithClock(fake))
				if err != nil {
					t.Fatal(err)
				}
				const waiters = 6
				got := make(chan error, waiters)
				for w := 0; w < waiters; w++ {
					go func() {
						_, err := c.Acquire(context.Background(), fmt.Sprintf("k%d", w%3), redlock.WithWait(time.Hour))
						got <- err
					}()
				}
				waitUntil(t, "every waiter waits", func() bool { return fake.Pending() == waiters })
				time.Sleep(time.Duration(try) * 30 * time.Millisecond) // the subject: Close lands at a different moment each try
				closed := make(chan struct{})
				go func() { c.Close(); close(closed) }()
				select {
				case <-closed:
				case <-time.After(10 * time.Second):
					t.Fatalf("try %d: Close hangs", try)
				}
				for w := 0; w < waiters; w++ {
					select {
					case err := <-got:
						if !errors.Is(err, redlock.ErrClosed) {
							t.Errorf("try %d: a waiter returned %v, want ErrClosed", try, err)
						}
					case <-time.After(10 * time.Second):
						t.Fatalf("try %d: %d of %d waiters still wait after Close", try, waiters-w, waiters)
					}
				}
				for i, rp := range plain {
					if st := rp.Stats(); st.ActiveCount != st.IdleCount {
						n := st.ActiveCount - st.IdleCount
						t.Errorf("try %d: the pool of master %d still has %d connections out", try, i, n)
					}
				}
			}
		})
	}
}

// A holder that vanishes (no release, so no notice) frees its key at its
// TTL; a waiter whose subscriptions are live then polls at its fallback
// poll, so it finds the key free at most that poll later: 2 s for a
// 10 s TTL (it was the 250 ms backoff before the fallback poll), half
// the TTL for a short one.
func TestWake_vanishedHoldersKeyFoundWithinTheFallbackPoll(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		for _, tc := range []struct {
			name string
			ttl  time.Duration // the waiter's
			poll time.Duration // the longest delay expected
		}{
			{"TTL 10s", 10 * time.Second, 2 * time.Second},
			{"TTL 1s", time.Second, 500 * time.Millisecond},
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := "vanish-" + tc.name
				holder, err := redigo.New(rs.pools, redlock.WithTimeout(realTimeout))
				if err != nil {
					t.Fatal(err)
				}
				hl, err := holder.Acquire(context.Background(), key, redlock.WithTTL(3*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				expiry := hl.Until()
				holder.Close() // vanishes: its lock stays until its TTL
				const waiters = 3
				type result struct {
					late time.Duration
					err  error
				}
				got := make(chan result, waiters)
				for w := 0; w < waiters; w++ {
					c := rs.client(t, path)
					go func() {
						l, err := c.Acquire(context.Background(), key, redlock.WithTTL(tc.ttl), redlock.WithWait(20*time.Second))
						late := time.Since(expiry)
						if err == nil {
							_ = l.Release(context.Background())
						}
						got <- result{late, err}
					}()
				}
				for w := 0; w < waiters; w++ {
					r := <-got
					if r.err != nil {
						t.Fatal(r.err)
					}
					t.Logf("a waiter got the key %v after the holder's validity ended", r.late.Round(time.Millisecond))
					// The key leaves the masters up to the drift allowance
					// after Until; the waiter then polls within tc.poll, and
					// its release wakes the next waiter. Margin for a loaded
					// machine.
					if r.late > tc.poll+time.Second {
						t.Errorf("a waiter got the key %v after the holder's validity ended, want at most %v", r.late, tc.poll+time.Second)
					}
				}
			})
		}
	})
}
