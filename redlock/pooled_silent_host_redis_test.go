package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// The pooled transport counts a master down only once it is silent for
// longer than the round's wait plus how long every master has been
// silent, and reads a reply late while its master is silent for less
// than the command's wait. These tests hold it to what that must not
// change: a failed attempt leaves nothing behind, calls return within
// their bounds with every master stopped, one stopped master among
// healthy ones is still dropped at the timeout, and a grant read late is
// never counted.

// pooledOf is a pooled Client of pools, closed with the test.
func pooledOf(t *testing.T, pools []pool.Pool, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redigo.New(pools, append(opts, redigo.WithPipelining(false))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// pooledUserClient is a pooled Client of servers through the user's own
// *redis.Pool (each closed with the test).
func pooledUserClient(t *testing.T, servers []*redistest.Server, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return pooledAddrClient(t, addrs, opts...)
}

// pooledClients are the two ways to a pooled Client of servers.
var pooledClients = []struct {
	name string
	make func(t *testing.T, servers []*redistest.Server, opts ...redlock.Option) *redlock.Client
}{
	{"pool.RedisPool", func(t *testing.T, servers []*redistest.Server, opts ...redlock.Option) *redlock.Client {
		t.Helper()
		pools := make([]pool.Pool, len(servers))
		for i, s := range servers {
			pools[i] = s.Pool()
		}
		return pooledOf(t, pools, opts...)
	}},
	{"redis.Pool", pooledUserClient},
}

// warm makes one acquisition and release with every master up, trying
// for a while on a busy machine.
func warm(t *testing.T, c *redlock.Client, key string) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, "an acquisition with every master up", func() bool {
		l, err := c.TryAcquire(context.Background(), key)
		if err != nil {
			return false
		}
		return l.Release(context.Background()) == nil
	})
}

func pauseAll(t *testing.T, servers []*redistest.Server) (resume func()) {
	t.Helper()
	for _, s := range servers {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			for _, s := range servers {
				_ = s.Resume()
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// quantile returns the q-quantile of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*q))]
}

// Every master stopped (SIGSTOP) while acquisitions are tried: they are
// now sent (not failed unsent as "known down"), so their SETs wait in the
// masters' sockets and run when the masters resume, after each attempt
// failed. Every such grant must be rolled back once the masters answer,
// long before the key's TTL (a minute): no rollback is lost, and another
// client takes each key at once.
func TestPooled_everyMasterStoppedFailedAttemptsLeaveNoKeyOnResume(t *testing.T) {
	redistest.SkipShort(t)
	for _, frozen := range []time.Duration{0, 1500 * time.Millisecond} {
		for _, n := range []int{1, 3} {
			for _, mk := range pooledClients {
				t.Run(fmt.Sprintf("frozen=%v/N=%d/%s", frozen, n, mk.name), func(t *testing.T) {
					everyMasterStoppedAttempts(t, n, frozen, mk.make)
				})
			}
		}
	}
}

func everyMasterStoppedAttempts(t *testing.T, n int, frozen time.Duration, mk func(*testing.T, []*redistest.Server, ...redlock.Option) *redlock.Client) {
	servers := redistest.Start(t, n)
	const timeout = 100 * time.Millisecond
	c := mk(t, servers, redlock.WithTimeout(timeout))
	warm(t, c, "silenthost:warm")
	before := make([]int, n)
	for i, s := range servers {
		before[i] = s.Calls("evalsha") + s.Calls("eval") + s.Calls("set")
	}
	resume := pauseAll(t, servers)
	ctx := context.Background()
	var keys []string
	for i := range 6 {
		key := fmt.Sprintf("silenthost:resume:%d", i)
		keys = append(keys, key)
		l, err := c.TryAcquire(ctx, key, redlock.WithTTL(time.Minute))
		if err == nil {
			t.Fatalf("acquired %s with every master stopped (until %v)", key, l.Until())
		}
		if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire %s: %v, want ErrNotAcquired", key, err)
		}
	}
	time.Sleep(frozen) // the subject: masters frozen past every read's bound
	resume()
	// The SETs run now; their rollbacks must follow.
	leftover.Within(t, 5*time.Second, servers, keys...)
	for i, s := range servers {
		t.Logf("master %d ran %d scripts/SETs while stopped and after", i, s.Calls("evalsha")+s.Calls("eval")+s.Calls("set")-before[i])
	}
	other := mk(t, servers, redlock.WithTimeout(realTimeout))
	for _, key := range keys {
		l, err := other.TryAcquire(ctx, key)
		if err != nil {
			t.Errorf("another client after the masters resumed, %s: %v", key, err)
			continue
		}
		_ = l.Release(ctx)
	}
}

// Every master stopped (SIGSTOP), N=1 and N=3: TryAcquire fails within
// the most an acquisition waits (stall.Bound.Ceiling: a second here) and does
// not claim a master "not tried"; Acquire and Release honour their ctx;
// a Release under no deadline returns within its wait (lateBound, a
// second); many goroutines at once do not pile up; and Close, with the
// masters still stopped, returns within its documented bound (one
// per-master timeout, at least a second, past the deadline of the last
// command in flight) and leaves no goroutine.
func TestPooled_everyMasterStoppedCallsReturnWithinTheirBounds(t *testing.T) {
	redistest.SkipShort(t)
	for _, n := range []int{1, 3} {
		for _, mk := range pooledClients {
			t.Run(fmt.Sprintf("N=%d/%s", n, mk.name), func(t *testing.T) {
				servers := redistest.Start(t, n)
				ignore := goleak.IgnoreCurrent()
				const timeout = 100 * time.Millisecond
				const slack = 400 * time.Millisecond // a loaded, shared machine
				const lateBound = time.Second        // stall.LateBound(timeout)
				c := mk.make(t, servers, redlock.WithTimeout(timeout))
				warm(t, c, "silenthost:bounds:warm")
				ctx := context.Background()
				held, err := c.TryAcquire(ctx, "silenthost:bounds:held", redlock.WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				pauseAll(t, servers)

				begin := time.Now()
				_, err = c.TryAcquire(ctx, "silenthost:bounds:try", redlock.WithTTL(10*time.Second))
				took := time.Since(begin)
				t.Logf("TryAcquire: %v after %v", err, took.Round(time.Millisecond))
				if !errors.Is(err, redlock.ErrNotAcquired) {
					t.Errorf("TryAcquire: %v, want ErrNotAcquired", err)
				}
				if took > lateBound+slack {
					t.Errorf("TryAcquire took %v with every master stopped, want at most %v", took, lateBound+slack)
				}

				actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				begin = time.Now()
				_, err = c.Acquire(actx, "silenthost:bounds:acquire")
				took = time.Since(begin)
				cancel()
				t.Logf("Acquire under 300ms: %v after %v", err, took.Round(time.Millisecond))
				if err == nil {
					t.Error("Acquire succeeded with every master stopped")
				}
				if took > 300*time.Millisecond+slack {
					t.Errorf("Acquire under a 300ms ctx took %v", took)
				}

				rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				begin = time.Now()
				err = held.Release(rctx)
				took = time.Since(begin)
				cancel()
				t.Logf("Release under 200ms: %v after %v", err, took.Round(time.Millisecond))
				if err == nil {
					t.Error("Release confirmed with every master stopped")
				}
				if took > 200*time.Millisecond+slack {
					t.Errorf("Release under a 200ms ctx took %v", took)
				}

				held2, err := c.TryAcquire(ctx, "silenthost:bounds:held2") // refused: stopped
				if err == nil {
					_ = held2.Release(ctx)
				}

				// Sixteen goroutines try for half a second.
				var mu sync.Mutex
				var ds []time.Duration
				var wg sync.WaitGroup
				end := time.Now().Add(500 * time.Millisecond)
				for g := range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; time.Now().Before(end); i++ {
							b := time.Now()
							l, err := c.TryAcquire(ctx, fmt.Sprintf("silenthost:bounds:many:%d:%d", g, i))
							d := time.Since(b)
							if err == nil {
								_ = l.Release(ctx)
								t.Error("acquired with every master stopped")
							}
							mu.Lock()
							ds = append(ds, d)
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				t.Logf("16 goroutines, every master stopped: TryAcquire %s", durStats(ds))
				if p99 := quantile(ds, 0.99); p99 > lateBound+slack {
					t.Errorf("TryAcquire p99 %v with every master stopped, want at most %v", p99, lateBound+slack)
				}

				// The last command in flight began by now; its deadline is at
				// most a release's wait (lateBound) later.
				last := time.Now()
				begin = time.Now()
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				closed := time.Since(begin)
				t.Logf("Close with every master stopped: %v", closed.Round(time.Millisecond))
				if bound := time.Until(last.Add(2*lateBound + slack)); bound < 0 {
					t.Errorf("Close took %v with every master stopped, past its bound (deadline + lateBound)", closed)
				}
				goleak.VerifyNone(t, ignore)
			})
		}
	}
}

// One master of three stopped (SIGSTOP) among healthy ones: rounds
// decide at the quorum, so TryAcquire+Release take about what they take
// with every master up, and the stopped master is still dropped at the
// timeout rather than waited for (the healthy masters' silence, which
// bounds every master's, stays near zero). p50 and p99 of a cycle, every
// master up and then one stopped, side by side, two goroutines each;
// then the same with four busy goroutines per P, where a loaded host
// makes the healthy masters' silence larger (logged only: under load the
// rounds wait for CPU).
func TestPooled_oneStoppedMasterCostsAsMuchAsEveryMasterUpUnderLoad(t *testing.T) {
	redistest.SkipShort(t)
	for _, mk := range pooledClients {
		t.Run(mk.name, func(t *testing.T) {
			servers := redistest.Start(t, 3)
			const timeout = 100 * time.Millisecond
			c := mk.make(t, servers, redlock.WithTimeout(timeout))
			warm(t, c, "silenthost:one:warm")
			ctx := context.Background()
			cycles := func(label string) (ds []time.Duration, failed int) {
				var mu sync.Mutex
				var wg sync.WaitGroup
				end := time.Now().Add(time.Second)
				for g := range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; time.Now().Before(end); i++ {
							b := time.Now()
							l, err := c.TryAcquire(ctx, fmt.Sprintf("silenthost:one:%s:%d:%d", label, g, i))
							if err == nil {
								err = l.Release(ctx)
							}
							d := time.Since(b)
							mu.Lock()
							ds = append(ds, d)
							if err != nil {
								failed++
							}
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				return ds, failed
			}
			for _, load := range []cpuLoad{loadNone, loadGoroutines4} {
				stop := load.start(t)
				healthy, hf := cycles("up:" + string(load))
				resume := pauseAll(t, servers[2:])
				stopped, sf := cycles("stopped:" + string(load))
				resume()
				stop()
				t.Logf("load %s, every master up:    %s, p99 %v, failed %d", load, durStats(healthy), quantile(healthy, 0.99).Round(time.Millisecond), hf)
				t.Logf("load %s, one master stopped: %s, p99 %v, failed %d", load, durStats(stopped), quantile(stopped, 0.99).Round(time.Millisecond), sf)
				if load != loadNone {
					continue
				}
				// With one master stopped, each cycle needs both others in
				// the timeout; on a busy host one of them misses it now and
				// then, as it would with every master up.
				if sf > len(stopped)/20 {
					t.Errorf("%d of %d cycles failed with one master of three stopped", sf, len(stopped))
				}
				if p50 := quantile(stopped, 0.5); p50 > timeout/2 {
					t.Errorf("one stopped master: p50 cycle %v, want well under the %v timeout (decided at the quorum)", p50, timeout)
				}
				if p99 := quantile(stopped, 0.99); p99 > 2*timeout+quantile(healthy, 0.99) {
					t.Errorf("one stopped master: p99 cycle %v, every master up %v", p99, quantile(healthy, 0.99))
				}
				// Resumed: wait for its answers before the next phase.
				redistest.Eventually(t, 5*time.Second, "the resumed master answering", func() bool {
					l, err := c.TryAcquire(ctx, "silenthost:one:resumed")
					if err != nil {
						return false
					}
					return l.Release(ctx) == nil
				})
			}
		})
	}
}

// A master stopped for 200-400 ms while the others answer: acquisitions
// keep succeeding at the quorum of the other two, no cycle waits much past
// the per-master timeout, and once it resumes nothing is left on any
// master (the grants it ran late are rolled back).
func TestPooled_masterStoppedBrieflyWhileOthersAnswer(t *testing.T) {
	redistest.SkipShort(t)
	for _, spell := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond} {
		for _, mk := range pooledClients {
			t.Run(fmt.Sprintf("%v/%s", spell, mk.name), func(t *testing.T) {
				servers := redistest.Start(t, 3)
				const timeout = 100 * time.Millisecond
				c := mk.make(t, servers, redlock.WithTimeout(timeout))
				warm(t, c, "silenthost:brief:warm")
				ctx := context.Background()
				var mu sync.Mutex
				var ds []time.Duration
				var errs []error
				var wg sync.WaitGroup
				stop := make(chan struct{})
				for g := range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; ; i++ {
							select {
							case <-stop:
								return
							default:
							}
							b := time.Now()
							l, err := c.TryAcquire(ctx, fmt.Sprintf("silenthost:brief:%d:%d", g, i), redlock.WithTTL(time.Minute))
							if err == nil {
								err = l.Release(ctx)
							}
							d := time.Since(b)
							mu.Lock()
							ds = append(ds, d)
							if err != nil {
								errs = append(errs, err)
							}
							mu.Unlock()
						}
					}()
				}
				redistest.Eventually(t, 5*time.Second, "cycles before the stop", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(ds) > 20
				})
				if err := servers[0].Pause(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(spell) // the subject: a master stopped for a spell
				if err := servers[0].Resume(); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				n := len(ds)
				mu.Unlock()
				redistest.Eventually(t, 5*time.Second, "cycles after the resume", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(ds) > n+20
				})
				close(stop)
				wg.Wait()
				// A cycle failed because masters 1 or 2 did not answer in
				// time too (their own redis-server not run for a timeout
				// on a loaded machine) is not what this test is about,
				// as long as it is rare; one failed with those two
				// answering is.
				var slowOthers []error
				errs = slices.DeleteFunc(errs, func(err error) bool {
					if othersFailedToo(err) {
						slowOthers = append(slowOthers, err)
						return true
					}
					return false
				})
				t.Logf("master 0 stopped %v: cycles %s, failed %d, and %d with another master also unanswered",
					spell, durStats(ds), len(errs), len(slowOthers))
				for i, err := range errs {
					if i < 3 {
						t.Errorf("a cycle failed with one master of three stopped for %v: %v", spell, err)
					}
				}
				if len(slowOthers)*20 > len(ds) {
					t.Errorf("%d of %d cycles failed with masters 1 or 2 unanswered too, e.g. %v", len(slowOthers), len(ds), slowOthers[0])
				}
				if mx := slices.Max(ds); mx > spell+timeout {
					t.Errorf("a cycle took %v, longer than the spell plus a timeout", mx)
				}
				leftover.None(t, servers)
			})
		}
	}
}

// slowProxies puts a proxy in front of each of servers[from:] that, once
// slow is set, holds every command but INFO for delay before running it:
// masters that became slow after the Client identified them. It returns
// every master's address, in order.
func slowProxies(t *testing.T, servers []*redistest.Server, from int, delay time.Duration, slow *atomic.Bool) []string {
	t.Helper()
	addrs := make([]string, len(servers))
	for i, s := range servers {
		if i < from {
			addrs[i] = s.Addr()
			continue
		}
		addrs[i] = hostile.NewProxy(t, s.Addr(), func(c *hostile.Conn, cmd []string) hostile.Verdict {
			if slow.Load() && cmd[0] != "INFO" {
				select {
				case <-time.After(delay):
				case <-c.Quit():
				}
			}
			return hostile.Forward
		}).Addr()
	}
	return addrs
}

// pooledAddrClient is a pooled Client of the masters at addrs, through
// the user's own *redis.Pool.
func pooledAddrClient(t *testing.T, addrs []string, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	pools := make([]pool.Pool, len(addrs))
	for i, a := range addrs {
		p := redistest.UserRedisPool(a, nil)
		t.Cleanup(func() { p.Close() })
		pools[i] = p
	}
	return pooledOf(t, pools, opts...)
}

// Two masters of three turn slow once identified: each command waits
// three per-master timeouts before it runs. Their grants come after the
// first rounds' deadlines, within lateBound, so the pooled transport
// reads them late (their master is silent for less than the command's
// wait) and the adaptive bound rises to them. A grant read late must never
// count for the round it came late to (the attempt fails, its grants are
// rolled back); once the bound has risen, a grant counted leaves validity
// from the round's start (Until at most start+TTL-drift) and no other
// client takes the key while it is held.
func TestPooled_grantReadLateIsNeverCounted(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 3)
	const timeout = 100 * time.Millisecond
	const delay = 3 * timeout
	var slow atomic.Bool
	c := pooledAddrClient(t, slowProxies(t, servers, 1, delay, &slow), redlock.WithTimeout(timeout))
	warm(t, c, "silenthost:late:warm")
	other := pooledUserClient(t, servers, redlock.WithTimeout(realTimeout))
	slow.Store(true)
	ctx := context.Background()
	const ttl = 5 * time.Second // the adaptive bound may rise to half a second
	var keys []string
	acquired, tries, failed := 0, 0, 0
	for i := range 5 {
		key := fmt.Sprintf("silenthost:late:%d", i)
		keys = append(keys, key)
		// Tried until the adaptive bound has learned the slow masters.
		redistest.Within(5*time.Second, func() bool {
			tries++
			before := time.Now()
			l, err := c.TryAcquire(ctx, key, redlock.WithTTL(ttl))
			if err != nil {
				failed++
				return false
			}
			acquired++
			// Validity counts from the round's start, which comes after
			// before by however long this process takes to reach it (a
			// stall, on a busy machine); counted from any grant, at
			// least delay after that start, it would end later than
			// this limit by half a delay.
			if limit := before.Add(ttl - ttl/100 + delay/2); l.Until().After(limit) {
				t.Errorf("%s: Until %v past start+TTL-drift+delay/2 %v", key, l.Until(), limit)
			}
			if took := time.Since(before); took < delay {
				t.Errorf("%s acquired in %v, before a slow master's grant (%v) could come", key, took, delay)
			}
			if o, err := other.TryAcquire(ctx, key); err == nil {
				t.Errorf("%s: another client acquired it while held (until %v)", key, l.Until())
				_ = o.Release(ctx)
			}
			_ = l.Release(ctx)
			return true
		})
	}
	t.Logf("acquired %d of 5 keys in %d tries (%d failed) through two masters %v slow", acquired, tries, failed, delay)
	if failed == 0 {
		t.Error("no attempt failed: no grant came late")
	}
	slow.Store(false)
	for _, key := range keys {
		redistest.Eventually(t, 5*time.Second, "the late grants rolled back", func() bool {
			return len(leftover.On(servers[1], key))+len(leftover.On(servers[2], key)) == 0
		})
		l, err := other.TryAcquire(ctx, key)
		if err != nil {
			t.Errorf("another client after the late grants, %s: %v", key, err)
			continue
		}
		_ = l.Release(ctx)
	}
}

// othersFailedToo reports whether err is a round that fell short with a
// master other than master 0 failed or unanswered in time.
func othersFailedToo(err error) bool {
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || qe.Failed == nil {
		return false
	}
	for _, e := range qe.Failed.Errors {
		var ne *redlock.NodeError
		if errors.As(e, &ne) && ne.Index != 0 {
			return true
		}
	}
	return false
}
