package redlock_test

// Tests against real redis-server masters on 127.0.0.1, started per test.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// realTimeout is generous: tests run under -race on two loaded cores, and
// no test here depends on a master timing out except where it is paused.
const realTimeout = 500 * time.Millisecond

type realSet struct {
	servers []*redistest.Server
	pools   []pool.Pool
}

func startReal(t *testing.T, n int, opts ...redistest.Option) *realSet {
	t.Helper()
	rs := &realSet{servers: redistest.Start(t, n, opts...)}
	for _, s := range rs.servers {
		rs.pools = append(rs.pools, s.Pool())
	}
	return rs
}

// client is a client of rs's masters on path, with the tests' per-master
// timeout.
func (rs *realSet) client(t *testing.T, path connPath, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redigo.New(rs.pools, testOptions(path, opts)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// clientKeeping is realSet.client on pools of its own that keep up to idle
// connections each, for a test whose goroutines run more rounds at once
// than the shared pools keep (pool.DefaultMaxIdle): beyond those, each
// round on the pooled path dials and closes a connection, and a busy
// machine's masters drop the SYNs of such a storm (resent after 1 s).
func (rs *realSet) clientKeeping(t *testing.T, idle int, path connPath, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	pools := make([]pool.Pool, len(rs.servers))
	for i, s := range rs.servers {
		pools[i] = s.Pool(pool.WithMaxIdle(idle))
	}
	c, err := redigo.New(pools, testOptions(path, opts)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// addrClient is realSet.client for masters given by address or URL
// (NewFromAddrs).
func addrClient(t *testing.T, path connPath, addrs []string, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := redigo.NewFromAddrs(addrs, testOptions(path, opts)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testOptions adds the tests' per-master timeout before opts and path's
// option after them.
func testOptions(path connPath, opts []redlock.Option) []redlock.Option {
	return append(append([]redlock.Option{redlock.WithTimeout(realTimeout)}, opts...), path.Option())
}

// values returns what each master holds at key ("" when absent).
func (rs *realSet) values(t *testing.T, key string) []string {
	t.Helper()
	vals := make([]string, len(rs.servers))
	for i, s := range rs.servers {
		v, err := redis.String(s.Do("GET", key))
		if err != nil && !errors.Is(err, redis.ErrNil) {
			t.Fatalf("GET on master %d: %v", i, err)
		}
		vals[i] = v
	}
	return vals
}

// holdEverywhere puts l's token at key on each master that lacks it
// (redistest.HoldEverywhere).
func (rs *realSet) holdEverywhere(t *testing.T, key string, l *redlock.Lock, ttl time.Duration) {
	t.Helper()
	redistest.HoldEverywhere(t, rs.servers, key, l.Token(), ttl)
}

func count(vals []string, want string) int {
	n := 0
	for _, v := range vals {
		if v == want {
			n++
		}
	}
	return n
}

func forEachN(t *testing.T, f func(t *testing.T, n int)) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) { f(t, n) })
	}
}

func TestClient_acquireExtendRelease(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forEachN(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			c := rs.client(t, path)
			ctx := context.Background()
			if c.Masters() != n || c.Quorum() != n/2+1 {
				t.Fatalf("Masters, Quorum = %d, %d", c.Masters(), c.Quorum())
			}

			// The client's first call asks each master for its run_id
			// before anything else (duplicate masters): make it here, so
			// that the bound below measures one acquisition only.
			warm, err := c.TryAcquire(ctx, "warm-up")
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}

			before := time.Now()
			l, err := c.Acquire(ctx, "job", redlock.WithTTL(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if l.Key() != "job" || len(l.Token()) < 32 {
				t.Errorf("Key, Token = %q, %q", l.Key(), l.Token())
			}
			if u := l.Until(); u.Before(before.Add(2*time.Second-realTimeout-40*time.Millisecond)) || u.After(before.Add(2*time.Second)) {
				t.Errorf("Until = %v from a 2s TTL taken at %v", u, before)
			}
			// Every master has it (all answer within the timeout here,
			// though the call returns at the quorum).
			ok := redistest.WaitFor(ctxT(t), func() bool { return count(rs.values(t, "job"), l.Token()) == n })
			if !ok {
				t.Fatalf("masters hold %v, want the token on all %d", rs.values(t, "job"), n)
			}
			for i, s := range rs.servers {
				pttl, _ := redis.Int(s.Do("PTTL", "job"))
				if pttl <= 0 || pttl > 2000 {
					t.Errorf("master %d: PTTL %d after a 2s TTL", i, pttl)
				}
			}

			if err := l.Extend(ctx, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			if time.Until(l.Until()) < 29*time.Second {
				t.Errorf("Until after a 30s extend is %v away", time.Until(l.Until()))
			}
			redistest.WaitFor(ctxT(t), func() bool {
				for _, s := range rs.servers {
					if pttl, _ := redis.Int(s.Do("PTTL", "job")); pttl < 20000 {
						return false
					}
				}
				return true
			})
			for i, s := range rs.servers {
				if pttl, _ := redis.Int(s.Do("PTTL", "job")); pttl < 20000 {
					t.Errorf("master %d: PTTL %d after extending to 30s", i, pttl)
				}
			}

			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			c.Close() // waits for the release on the masters not needed for the quorum
			if vals := rs.values(t, "job"); count(vals, "") != n {
				t.Errorf("after release masters hold %v", vals)
			}
		})
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestClient_secondClientIsRefused(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forEachN(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			a, b := rs.client(t, path), rs.client(t, path)
			ctx := context.Background()
			l, err := a.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			// The masters not needed for the quorum answer a moment later.
			redistest.WaitFor(ctxT(t), func() bool { return count(rs.values(t, "k"), l.Token()) == n })
			_, err = b.TryAcquire(ctx, "k")
			if !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("second client: %v, want ErrNotAcquired", err)
			}
			var qe *redlock.QuorumError
			if !errors.As(err, &qe) || len(qe.Refused) < n-n/2 || qe.Failed != nil {
				t.Errorf("QuorumError %+v: want refusals from at least %d masters and no failures", qe, n-n/2)
			}
			// Acquire with a short wait gives up too, and leaves the holder alone.
			_, err = b.Acquire(ctx, "k", redlock.WithWait(100*time.Millisecond))
			if !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("second client Acquire: %v", err)
			}
			b.Close()
			if vals := rs.values(t, "k"); count(vals, l.Token()) != n {
				t.Errorf("the holder's key changed: %v", vals)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func TestClient_foreignTokenCannotReleaseOrExtend(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forEachN(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			c := rs.client(t, path)
			ctx := context.Background()
			l, err := c.Acquire(ctx, "k", redlock.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			// Let the masters not needed for the quorum answer too.
			redistest.WaitFor(ctxT(t), func() bool { return count(rs.values(t, "k"), l.Token()) == n })
			// Another holder took the key on every master (as after our TTL
			// ran out there while we were paused).
			for _, s := range rs.servers {
				if _, err := s.Do("SET", "k", "foreign", "PX", 60000); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Extend(ctx, 5*time.Second); !errors.Is(err, redlock.ErrLockLost) {
				t.Errorf("Extend over a foreign token: %v, want ErrLockLost", err)
			}
			if err := l.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
				t.Errorf("Release over a foreign token: %v, want ErrNotHeld", err)
			}
			c.Close()
			if vals := rs.values(t, "k"); count(vals, "foreign") != n {
				t.Errorf("the foreign holder's key was touched: %v", vals)
			}
			for i, s := range rs.servers {
				if pttl, _ := redis.Int(s.Do("PTTL", "k")); pttl < 50000 {
					t.Errorf("master %d: the foreign key's TTL changed to %dms", i, pttl)
				}
			}
		})
	})
}

func TestClient_vanishedHolderFreesAtTTL(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, path connPath) {
		forEachN(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			a, b := rs.client(t, path), rs.client(t, path)
			ctx := context.Background()
			// a takes the lock and vanishes without releasing.
			la, err := a.Acquire(ctx, "k", redlock.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			lb, err := b.Acquire(ctx, "k", redlock.WithTTL(time.Second), redlock.WithWait(5*time.Second))
			if err != nil {
				t.Fatalf("the key was never freed: %v", err)
			}
			if time.Since(start) < 500*time.Millisecond {
				t.Errorf("acquired after %v, long before the first holder's 1s TTL", time.Since(start))
			}
			if la.Token() == lb.Token() {
				t.Fatal("same token twice")
			}
			if err := lb.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	})
}

func TestClient_failedAcquireLeavesNoKey(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forEachN(t, func(t *testing.T, n int) {
			if n == 1 {
				t.Skip("with one master a failed attempt never wrote anything: the N=3 and N=5 cases cover rollback")
			}
			rs := startReal(t, n)
			// Another holder owns the key on a majority; the rest are free, so
			// our attempt is granted there and must be undone.
			for i := 0; i < n/2+1; i++ {
				if _, err := rs.servers[i].Do("SET", "k", "other", "PX", 60000); err != nil {
					t.Fatal(err)
				}
			}
			c := rs.client(t, path)
			for i := 0; i < 20; i++ {
				if _, err := c.TryAcquire(context.Background(), "k"); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("attempt %d: %v, want ErrNotAcquired", i, err)
				}
			}
			c.Close()
			vals := rs.values(t, "k")
			if count(vals, "other") != n/2+1 || count(vals, "") != n-(n/2+1) {
				t.Errorf("after failed attempts masters hold %v; want only the other holder's keys", vals)
			}
		})
	})
}

func TestClient_cancelledCtxLeavesNoKey(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 5)
		c := rs.client(t, path)
		cut := 0
		for i := 0; i < 50; i++ {
			// Deadlines that expire mid-attempt, at every point of it.
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i*10)*time.Microsecond)
			l, err := c.TryAcquire(ctx, "k")
			cancel()
			if err == nil {
				if err := l.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
				continue
			}
			// Either the deadline cut the attempt short, or an earlier cut-short
			// attempt's rollback had not landed yet and the key looked taken.
			if !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("err = %v, want ErrNotAcquired", err)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				cut++
			}
		}
		if cut == 0 {
			t.Error("no attempt was cut short by its deadline")
		}
		c.Close()
		if vals := rs.values(t, "k"); count(vals, "") != 5 {
			t.Errorf("after cancelled attempts masters hold %v", vals)
		}
	})
}

func TestClient_pausedMasterDoesNotSlowLocking(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		// A per-master timeout of 2s: were the client to wait for the paused
		// master, each call would take at least 2s. The quorum of the four
		// live masters decides in milliseconds.
		const timeout = 2 * time.Second
		rs := startReal(t, 5)
		c := rs.client(t, path, redlock.WithTimeout(timeout))
		ctx := context.Background()
		// Warm the pools so the paused master has an idle connection too.
		l, err := c.Acquire(ctx, "warm")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rs.servers[4].Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.servers[4].Resume() })

		for i := 0; i < 3; i++ {
			start := time.Now()
			l, err := c.Acquire(ctx, "k", redlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Extend(ctx, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el >= timeout {
				t.Fatalf("acquire+extend+release took %v with one master paused: it waited for the paused master", el)
			}
		}
		if err := rs.servers[4].Resume(); err != nil {
			t.Fatal(err)
		}
		c.Close() // the paused master's commands finish (or time out) now
	})
}

func TestClient_minorityDownMajorityDown(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 5)
		c := rs.client(t, path)
		ctx := context.Background()
		rs.servers[0].Kill()
		rs.servers[3].Kill()
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatalf("two of five masters down: %v", err)
		}
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}

		rs.servers[1].Kill()
		_, err = c.TryAcquire(ctx, "k")
		if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("three of five masters down: %v", err)
		}
		for _, i := range []int{0, 1, 3} {
			if !strings.Contains(err.Error(), rs.servers[i].Addr()) {
				t.Errorf("error does not name the failed master %s: %v", rs.servers[i].Addr(), err)
			}
		}
		var ne *redlock.NodeError
		if !errors.As(err, &ne) {
			t.Errorf("no *NodeError in %v", err)
		}

		for _, i := range []int{0, 1, 3} {
			if err := rs.servers[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		l, err = c.Acquire(ctx, "k")
		if err != nil {
			t.Fatalf("after the masters came back: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestClient_scriptCacheFlushed(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		ctx := context.Background()
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rs.servers {
			if _, err := s.Do("SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatalf("extend after SCRIPT FLUSH: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release after SCRIPT FLUSH: %v", err)
		}
	})
}

func TestClient_expiredLockIsLostNotRetaken(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		ctx := context.Background()
		l, err := c.Acquire(ctx, "k", redlock.WithTTL(600*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(l.Until()) + 100*time.Millisecond) // the subject: the lock's validity runs out
		if err := l.Extend(ctx, 5*time.Second); !errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("Extend of an expired lock: %v, want ErrLockLost", err)
		}
		time.Sleep(100 * time.Millisecond) // the subject: the TTL passes on every master
		if vals := rs.values(t, "k"); count(vals, "") != 3 {
			t.Errorf("an expired lock was re-created: %v", vals)
		}
		if err := l.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
			t.Errorf("Release of an expired lock: %v, want ErrNotHeld", err)
		}
	})
}

func TestClient_concurrentClientsExcludeEachOther(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		const workers, rounds = 6, 15
		var holders, maxHolders, done atomic.Int32
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			c := rs.client(t, path)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					l, err := c.Acquire(context.Background(), "shared", redlock.WithTTL(5*time.Second), redlock.WithWait(30*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					if h := holders.Add(1); h > maxHolders.Load() {
						maxHolders.Store(h)
					}
					time.Sleep(time.Millisecond) // the subject: a hold long enough for an overlap to show
					holders.Add(-1)
					if err := l.Release(context.Background()); err != nil {
						t.Error(err)
						return
					}
					done.Add(1)
				}
			}()
		}
		wg.Wait()
		if maxHolders.Load() != 1 {
			t.Errorf("%d holders at once", maxHolders.Load())
		}
		if done.Load() != workers*rounds {
			t.Errorf("%d critical sections, want %d", done.Load(), workers*rounds)
		}
	})
}

func TestClient_lockIsSafeForConcurrentUse(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		l, err := c.Acquire(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var released atomic.Int32
		for i := 0; i < 8; i++ {
			wg.Add(2)
			go func() {
				defer wg.Done()
				_ = l.Extend(context.Background(), 5*time.Second)
				_ = l.Until()
			}()
			go func() {
				defer wg.Done()
				if l.Release(context.Background()) == nil {
					released.Add(1)
				}
			}()
		}
		wg.Wait()
		if released.Load() != 1 {
			t.Errorf("%d releases succeeded, want exactly 1", released.Load())
		}
		c.Close()
		if vals := rs.values(t, "k"); count(vals, "") != 3 {
			t.Errorf("masters hold %v after release", vals)
		}
	})
}

func TestClient_newFromAddrs(t *testing.T) {
	servers := redistest.Start(t, 3)
	addrs := []string{servers[0].Addr(), "redis://" + servers[1].Addr() + "/0", "redis://" + servers[2].Addr()}
	c, err := redigo.NewFromAddrs(addrs, redlock.WithTimeout(realTimeout))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}

	_, err = redigo.NewFromAddrs([]string{servers[0].Addr(), "redis://" + servers[0].Addr() + "/1"})
	if !errors.Is(err, redlock.ErrInvalid) || !strings.Contains(err.Error(), "same master") {
		t.Errorf("the same server twice (other db): %v", err)
	}
	_, err = redigo.NewFromAddrs([]string{"redis://user:s3cret@127.0.0.1:notaport"})
	if !errors.Is(err, redlock.ErrInvalid) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("bad URL: %v", err)
	}
}

func TestClient_loggerReceivesMasterFailures(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		var buf syncBuffer
		logger := slog.New(slog.NewJSONHandler(&buf, nil))
		c := rs.client(t, path, redlock.WithLogger(logger))
		rs.servers[2].Kill()
		l, err := c.Acquire(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		c.Close()
		out := buf.String()
		for _, want := range []string{`"level":"WARN"`, `"op":"acquire"`, `"master":2`, `"addr":"` + rs.servers[2].Addr() + `"`} {
			if !strings.Contains(out, want) {
				t.Errorf("log lacks %s:\n%s", want, out)
			}
		}
	})
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestClient_masterRestartDoesNotFailStaleConnections(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 1)
		c := rs.client(t, path)
		ctx := context.Background()
		// Fill the pool with idle connections: concurrent calls each take one.
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 20; j++ {
					l, err := c.TryAcquire(ctx, fmt.Sprintf("warm-%d", i))
					if err != nil {
						t.Error(err)
						return
					}
					if err := l.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err := rs.servers[0].Restart(); err != nil {
			t.Fatal(err)
		}
		// Every idle connection is now dead; each call retries once on a newly
		// dialed connection, never on another stale one.
		for i := 0; i < 12; i++ {
			l, err := c.TryAcquire(ctx, "k")
			if err != nil {
				t.Fatalf("call %d after the restart: %v", i, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("release %d after the restart: %v", i, err)
			}
		}
	})
}
