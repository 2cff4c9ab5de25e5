package redlock_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// numSub returns how many subscribers the master has on channel.
func numSub(t *testing.T, rs *realSet, i int, channel string) int {
	t.Helper()
	vals, err := redis.Values(rs.servers[i].Do("PUBSUB", "NUMSUB", channel))
	if err != nil || len(vals) != 2 {
		t.Fatalf("PUBSUB NUMSUB: %v, %v", vals, err)
	}
	n, _ := redis.Int(vals[1], nil)
	return n
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, what, cond)
}

// A waiter on a fake clock whose backoff never fires acquires the key as
// soon as the holder releases it: only the release notice can wake it.
func TestRelease_wakesWaiterWithoutBackoff(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := context.Background()
			l, err := rs.client(t, path).Acquire(ctx, "k", redlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			expectWake(t, path, rs, []string{"k"}, func(c *redlock.Client) (func(context.Context) error, error) {
				return releaser(c.Acquire(ctx, "k", redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour)))
			}, l.Release)
		})
	})
}

// Many waiters on many keys share one subscriber connection per master,
// and the last waiter of a key unsubscribes it.
func TestWake_waitersShareOneSubscriberPerMaster(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		holder := rs.client(t, path)
		waiters := rs.client(t, path, redlock.WithTimeout(realTimeout))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const keys = 20
		for i := 0; i < keys; i++ {
			if _, err := holder.Acquire(ctx, fmt.Sprintf("k%d", i), redlock.WithTTL(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for i := 0; i < keys; i++ {
			for j := 0; j < 3; j++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _ = waiters.Acquire(ctx, fmt.Sprintf("k%d", i), redlock.WithWait(time.Hour))
				}()
			}
		}
		waitUntil(t, "every key's channel has its subscriber", func() bool {
			for i := 0; i < keys; i++ {
				if numSub(t, rs, 0, fmt.Sprintf("quorumlock:released:k%d", i)) != 1 {
					return false
				}
			}
			return true
		})
		for i := range rs.servers {
			list, err := redis.String(rs.servers[i].Do("CLIENT", "LIST", "TYPE", "pubsub"))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Count(list, "\n"); got != 1 {
				t.Errorf("master %d has %d pub/sub connections for %d waiters on %d keys, want 1:\n%s", i, got, 3*keys, keys, list)
			}
		}
		cancel()
		wg.Wait()
		waitUntil(t, "the waiters' channels are unsubscribed", func() bool {
			return numSub(t, rs, 0, "quorumlock:released:k0") == 0
		})
	})
}

// plainPool is a pool.Pool that is neither a *redis.Pool nor a pool.Dialer: the
// subscriber can only borrow its connections.
type plainPool struct{ p *redis.Pool }

func (pp plainPool) GetContext(ctx context.Context) (redis.Conn, error) { return pp.p.GetContext(ctx) }

// Close returns promptly after waiters used a pool that is not a dialer (a
// plain *redis.Pool, or a pool of the user's own): the subscriber's
// connection is not closed under its reader.
func TestWake_closeAfterWaitersWithPlainPools(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*redis.Pool) pool.Pool
	}{
		{"redis.Pool", func(p *redis.Pool) pool.Pool { return p }},
		{"own pool", func(p *redis.Pool) pool.Pool { return plainPool{p} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := startReal(t, 3)
			for try := 0; try < 5; try++ {
				pools := make([]pool.Pool, len(rs.servers))
				for i, s := range rs.servers {
					rp := &redis.Pool{MaxIdle: 4, DialContext: func(ctx context.Context) (redis.Conn, error) {
						return redis.DialContext(ctx, "tcp", s.Addr())
					}}
					defer rp.Close()
					pools[i] = tc.wrap(rp)
				}
				c, err := redigo.New(pools, redlock.WithTimeout(realTimeout))
				if err != nil {
					t.Fatal(err)
				}
				key := fmt.Sprintf("k%d", try)
				if _, err := c.Acquire(context.Background(), key, redlock.WithTTL(time.Minute)); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() {
					defer close(done)
					_, _ = c.Acquire(ctx, key, redlock.WithWait(time.Hour))
				}()
				waitUntil(t, "the waiter subscribed on every master", func() bool {
					for i := range rs.servers {
						if numSub(t, rs, i, "quorumlock:released:"+key) != 1 {
							return false
						}
					}
					return true
				})
				if try%2 == 1 {
					cancel() // the waiter is gone; the subscriber still lives
					<-done
				}
				closed := make(chan struct{})
				go func() {
					c.Close()
					close(closed)
				}()
				select {
				case <-closed:
				case <-time.After(10 * time.Second):
					t.Fatalf("try %d: Close hangs", try)
				}
				cancel()
				<-done
			}
		})
	}
}

// Every release of a reentrant owner wakes a waiter, not only its first:
// releases are told apart by an id of their own, not by the owner, which
// all of them share.
func TestReentrant_ownersLaterReleaseWakes(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		// "blocked" is held for good, so the sentinel below never wins: it
		// keeps the waiter's client following "lock" across both releases.
		if _, err := rs.client(t, path).Acquire(ctx, "blocked", redlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
		a, err := rs.client(t, path).NewReentrant("lock", "owner-a", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		fake := &backoffCounter{Fake: clock.NewFake(time.Unix(1_700_000_000, 0)), timeout: realTimeout}
		w := rs.client(t, path, redlock.WithClock(fake))
		sctx, stopSentinel := context.WithCancel(ctx)
		sentinel := make(chan struct{})
		go func() {
			defer close(sentinel)
			_, _ = w.AcquireMulti(sctx, []string{"lock", "blocked"}, redlock.WithWait(time.Hour))
		}()
		defer func() { stopSentinel(); <-sentinel }()
		subscribed := func() bool {
			for i := range rs.servers {
				if numSub(t, rs, i, "quorumlock:released:lock") != 1 {
					return false
				}
			}
			return true
		}
		waitUntil(t, "the sentinel waits", func() bool { return subscribed() && fake.Pending() >= 1 })
		// The owner's first release and its next hold.
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := w.NewReentrant("lock", "owner-b", redlock.WithWait(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		// owner-b waits once its first attempt failed and it started its
		// backoff (registered for the release notice before that): a
		// backoff timer, not just its attempt's collect timer, pending.
		// Nothing else starts one meanwhile: the sentinel waits on its own.
		backoffs := fake.backoffs.Load()
		got := make(chan error, 1)
		go func() { got <- b.Acquire(ctx) }()
		waitUntil(t, "owner-b waits", func() bool { return fake.backoffs.Load() > backoffs })
		// The owner's second release must wake owner-b: its backoff never fires.
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the owner's second release did not wake the waiter")
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cmdCalls returns how many times the master has run cmd (INFO
// commandstats).
func cmdCalls(t *testing.T, rs *realSet, i int, cmd string) int {
	t.Helper()
	return rs.servers[i].Calls(cmd)
}

// Waiters whose subscriptions are live poll a held key only at the
// fallback poll (seconds), not at every backoff (≤ 250 ms): the release's
// notice wakes them.
func TestWake_waitersWithLiveSubscriptionsPollRarely(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		waiters := 300
		if s := os.Getenv("QUORUMLOCK_TEST_WAITERS"); s != "" {
			fmt.Sscan(s, &waiters)
		}
		rs := startReal(t, 3)
		holder := rs.client(t, path)
		l, err := holder.Acquire(context.Background(), "k", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		// One connection kept per waiter on the pooled path, as separate
		// processes would have (the pipelined path dials its own).
		w := rs.clientKeeping(t, waiters, path)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var got atomic.Int32
		for range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := w.Acquire(ctx, "k", redlock.WithWait(time.Hour))
				if err == nil {
					got.Add(1)
					_ = l.Release(context.Background())
				}
			}()
		}
		defer func() { cancel(); wg.Wait() }()
		// The waiters' first rounds and the subscribers' dials share the
		// CPUs; a subscriber's dial that times out is retried a second later.
		redistest.Eventually(t, 30*time.Second, "the waiters subscribed on every master", func() bool {
			for i := range rs.servers {
				if numSub(t, rs, i, "quorumlock:released:k") != 1 {
					return false
				}
			}
			return true
		})
		time.Sleep(2 * time.Second) // the subject: the waiters' backoffs climb to their maximum
		const window = 4 * time.Second
		before, cpu := cmdCalls(t, rs, 0, "set"), cpuTime()
		time.Sleep(window) // the subject: the waiters' steady rate of attempts
		rate := float64(cmdCalls(t, rs, 0, "set")-before) / window.Seconds()
		t.Logf("%d waiters on a held key: %.0f SET/s to one master, %.2f cores of client CPU",
			waiters, rate, (cpuTime()-cpu).Seconds()/window.Seconds())
		// The fallback poll is drawn from [1 s, 2 s] (half the default TTL,
		// at most 2 s): about waiters/1.5 per second. The backoff alone would
		// be waiters/0.19.
		if limit := float64(waiters) / 0.75; rate > limit {
			t.Errorf("%.0f SET/s with %d waiters, want at most %.0f", rate, waiters, limit)
		}
		// A release still hands the key over. (That the notice, not a poll,
		// wakes the waiter is TestRelease_wakesWaiterWithoutBackoff's: here
		// some waiter polls every few milliseconds.)
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "a waiter got the lock", func() bool { return got.Load() >= 1 })
	})
}

// A waiter woken by a release that then gives up without the lock passes
// the notice on to the next waiter of the key, which would otherwise sleep
// until its fallback poll (here: never, on a fake clock).
func TestWake_wokenWaiterThatGivesUpPassesTheNoticeOn(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 1) // one master: one wake per release
		ctx := ctxT(t)
		other := rs.client(t, path)
		if _, err := other.Acquire(ctx, "blocked", redlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
		l, err := other.Acquire(ctx, "k", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		fake := clock.NewFake(time.Unix(1_700_000_000, 0))
		w := rs.client(t, path, redlock.WithClock(fake))
		var pauses atomic.Int64 // pauses begun by w's waiters after their latest attempt
		redlock.SetSettled(w, func() { pauses.Add(1) })
		// The first waiter can never win: it also needs "blocked".
		ctx1, giveUp := context.WithCancel(ctx)
		first := make(chan struct{})
		go func() {
			defer close(first)
			_, _ = w.AcquireMulti(ctx1, []string{"k", "blocked"}, redlock.WithWait(time.Hour))
		}()
		defer func() { giveUp(); <-first }()
		waitUntil(t, "the first waiter waits", func() bool {
			return numSub(t, rs, 0, "quorumlock:released:k") == 1 && fake.Pending() >= 1 && pauses.Load() >= 1
		})
		got := make(chan error, 1)
		go func() {
			l, err := w.Acquire(ctx, "k", redlock.WithWait(time.Hour))
			if err == nil {
				err = l.Release(context.Background())
			}
			got <- err
		}()
		waitUntil(t, "the second waiter waits", func() bool { return fake.Pending() >= 2 && pauses.Load() >= 2 })
		// The release wakes the first waiter, which fails on "blocked"
		// and pauses again.
		before := pauses.Load()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the first waiter, woken, was refused and waits again", func() bool { return pauses.Load() > before })
		giveUp()
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the notice was not passed on: the second waiter sleeps")
		}
	})
}

// backoffCounter is a fake clock that counts the timers a client starts
// other than its rounds' collect timers (which run for exactly the
// per-master timeout): its backoff delays. A caller has registered for
// release notices by the time it starts one.
type backoffCounter struct {
	*clock.Fake
	timeout  time.Duration
	backoffs atomic.Int64
}

func (b *backoffCounter) NewTimer(d time.Duration) clock.Timer {
	if d != b.timeout {
		b.backoffs.Add(1)
	}
	return b.Fake.NewTimer(d)
}

// A release that happens after a waiter's attempt was refused but before
// its subscription is live is not lost: the waiter, on a fake clock whose
// backoff never fires, still gets the lock. Both with the key's channel
// not yet subscribed (the waiter subscribes, then tries once more) and
// with it still subscribed from an earlier wait (the notice is counted).
func TestRelease_betweenRefusalAndSubscriptionIsHeard(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			for _, warm := range []bool{false, true} {
				t.Run(fmt.Sprintf("subscribed=%v", warm), func(t *testing.T) {
					rs := startReal(t, n)
					ctx := ctxT(t)
					holder := rs.client(t, path)
					pc := newPauseClock()
					w := rs.client(t, path, redlock.WithClock(pc))
					if warm {
						// An earlier wait on the key, woken by a release.
						l, err := holder.Acquire(ctx, "k", redlock.WithTTL(time.Minute))
						if err != nil {
							t.Fatal(err)
						}
						expectWakeOn(t, rs, w, pc, []string{"k"}, func(c *redlock.Client) (func(context.Context) error, error) {
							return releaser(c.Acquire(ctx, "k", redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour)))
						}, l.Release)
					}
					l, err := holder.Acquire(ctx, "k", redlock.WithTTL(time.Minute))
					if err != nil {
						t.Fatal(err)
					}
					var once sync.Once
					redlock.SetBeforeWait(w, func() {
						once.Do(func() {
							if err := l.Release(context.Background()); err != nil {
								t.Error(err)
							}
							waitUntil(t, "every master ran the release", func() bool {
								for i := range rs.servers {
									if n, _ := redis.Int(rs.servers[i].Do("EXISTS", "k")); n != 0 {
										return false
									}
								}
								return true
							})
						})
					})
					got := make(chan error, 1)
					go func() {
						l, err := w.Acquire(ctx, "k", redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour))
						if err == nil {
							err = l.Release(context.Background())
						}
						got <- err
					}()
					select {
					case err := <-got:
						if err != nil {
							t.Fatal(err)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("the release in the window was not heard: the waiter sleeps")
					}
				})
			}
		})
	})
}
