package redlock_test

// Pools of the user's own (a plain *redis.Pool, a wrapper around a
// pool.RedisPool) on real masters: which path they take, how many
// connections that costs the masters, and that every lock kind works on it.

import (
	"context"
	"errors"
	"fmt"
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

// dialingPool wraps a pool.RedisPool and passes its Dialer on.
type dialingPool struct{ p *pool.RedisPool }

func (d dialingPool) GetContext(ctx context.Context) (redis.Conn, error) {
	return d.p.GetContext(ctx)
}

func (d dialingPool) Dial(ctx context.Context) (redis.Conn, error) { return d.p.Dial(ctx) }

// userPool is one master's pool of the user's own, with what the test
// reads of it.
type userPool struct {
	pool  pool.Pool
	stats func() redis.PoolStats // what the pool lent
	dials *atomic.Int64          // connections it dialed (nil: not counted)
}

// userPoolShape makes a pool of one kind for the master at addr; every
// connection it dials is named name (CLIENT SETNAME).
type userPoolShape struct {
	name      string
	make      func(t *testing.T, addr, name string) userPool
	pipelined bool // with the default options
}

func redigoPool(t *testing.T, addr, name string, withCtx bool) (*redis.Pool, *atomic.Int64) {
	var dials atomic.Int64
	opts := []redis.DialOption{redis.DialClientName(name), redis.DialReadTimeout(time.Second), redis.DialWriteTimeout(time.Second)}
	rp := &redis.Pool{MaxIdle: 64}
	if withCtx {
		rp.DialContext = func(ctx context.Context) (redis.Conn, error) {
			dials.Add(1)
			return redis.DialContext(ctx, "tcp", addr, opts...)
		}
	} else {
		rp.Dial = func() (redis.Conn, error) {
			dials.Add(1)
			return redis.Dial("tcp", addr, opts...)
		}
	}
	t.Cleanup(func() { rp.Close() })
	return rp, &dials
}

var userPoolShapes = []userPoolShape{
	{"redis.Pool with DialContext", func(t *testing.T, addr, name string) userPool {
		rp, dials := redigoPool(t, addr, name, true)
		return userPool{rp, rp.Stats, dials}
	}, true},
	{"redis.Pool with Dial", func(t *testing.T, addr, name string) userPool {
		rp, dials := redigoPool(t, addr, name, false)
		return userPool{rp, rp.Stats, dials}
	}, true},
	{"wrapped pool.RedisPool passing Dialer on", func(t *testing.T, addr, name string) userPool {
		p, err := pool.New(addr, pool.WithMaxIdle(64), pool.WithDialOptions(redis.DialClientName(name)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return userPool{dialingPool{p}, p.Stats, nil}
	}, true},
	// A pool that can neither dial nor is a *redis.Pool keeps the pooled
	// path (docs/design.md says why).
	{"own pool that cannot dial", func(t *testing.T, addr, name string) userPool {
		rp, dials := redigoPool(t, addr, name, true)
		return userPool{plainPool{rp}, rp.Stats, dials}
	}, false},
}

// connsNamed counts the connections named name on s: lock connections
// (they ran a lock command last) and all.
func connsNamed(t *testing.T, s *redistest.Server, name string) (lock, all int) {
	t.Helper()
	list, err := redis.String(s.Do("CLIENT", "LIST"))
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	for _, line := range strings.Split(list, "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				f[k] = v
			}
		}
		if f["name"] != name {
			continue
		}
		all++
		switch f["cmd"] {
		case "NULL", "client|setname", "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ping":
			continue // not yet used, or the subscriber's
		}
		if f["sub"] == "0" && f["psub"] == "0" {
			lock++
		}
	}
	return lock, all
}

// Pools of the user's own pipeline when they can dial (a *redis.Pool
// through its DialContext or Dial, a wrapper passing pool.Dialer on): 64
// goroutines taking every lock kind share ONE lock connection per master,
// dialed with the user's settings; the user's pool lends nothing. Waiters
// are woken by releases, and Close leaves no connection. A pool that
// cannot dial keeps the pooled path; so does WithPipelining(false).
func TestUserPool_pipelinesEveryKind(t *testing.T) {
	for _, shape := range userPoolShapes {
		for _, pipelining := range []bool{true, false} {
			if !pipelining && !shape.pipelined {
				continue // the same as with pipelining on
			}
			t.Run(fmt.Sprintf("%s/pipelining=%v", shape.name, pipelining), func(t *testing.T) {
				testUserPools(t, shape, pipelining)
			})
		}
	}
}

func testUserPools(t *testing.T, shape userPoolShape, pipelining bool) {
	const n = 5
	servers := redistest.Start(t, n)
	const name = "userpool"
	pools := make([]userPool, n)
	plain := make([]pool.Pool, n)
	for i, s := range servers {
		pools[i] = shape.make(t, s.Addr(), name)
		plain[i] = pools[i].pool
	}
	c, err := redigo.New(plain, redlock.WithTimeout(realTimeout), redigo.WithPipelining(pipelining))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wantPipelined := shape.pipelined && pipelining

	// Sample the lock connections on every master while the load runs.
	stop := make(chan struct{})
	sampled := make(chan []int, 1)
	go func() {
		most := make([]int, n)
		defer func() { sampled <- most }()
		for {
			for i, s := range servers {
				lock, _ := connsNamed(t, s, name)
				most[i] = max(most[i], lock)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	// A budget for the whole load, not a timing: on the pooled path under
	// CPU load it took up to 9.4 s of ctxT's 10, and a reader waited over
	// 20 s behind the writers of its key on a slow machine.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const goroutines, rounds = 64, 6
	// Exclusive holders of each shared key: [shared][0] the fair lock
	// sk:fair, [shared][1] the write lock sk:rw (two keys, two counters).
	var holders [4][2]atomic.Int32
	hold := func(k, kind int) func() {
		if holders[k][kind].Add(1) != 1 {
			t.Errorf("two exclusive holders of shared key %d (%s) at once", k, [2]string{"fair", "write"}[kind])
		}
		time.Sleep(100 * time.Microsecond) // the subject: a hold long enough for an overlapping holder to show
		return func() { holders[k][kind].Add(-1) }
	}
	wait := []redlock.LockOption{redlock.WithWait(time.Minute), redlock.WithTTL(10 * time.Second)}
	var unconfirmed atomic.Int32 // releases not confirmed in time
	defer func() {
		if n := unconfirmed.Load(); n > 0 {
			t.Logf("%d releases not confirmed in time", n)
		}
	}()
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own := fmt.Sprintf("own%d", g)
			shared := g % len(holders)
			sk := fmt.Sprintf("shared%d", shared)
			fail := func(what string, err error) bool {
				// A release a quorum did not confirm in time (a slow
				// machine: the masters past the release's wait) leaves
				// the key to its TTL; the next acquisitions wait for it.
				// What this test checks is the connections, not that.
				if strings.Contains(what, "release") && errors.Is(err, redlock.ErrNotReleased) && !errors.Is(err, redlock.ErrNotHeld) {
					unconfirmed.Add(1)
					return false
				}
				if err != nil {
					t.Errorf("goroutine %d: %s: %v", g, what, err)
					return true
				}
				return false
			}
			var lastFence uint64
			for r := 0; r < rounds; r++ {
				// plain, on its own key
				l, err := c.Acquire(ctx, own, wait...)
				if fail("plain", err) || fail("plain release", l.Release(ctx)) {
					return
				}
				// fenced, on its own key: the token grows
				l, err = c.Acquire(ctx, own+":f", append(wait, redlock.WithFencing())...)
				if fail("fenced", err) {
					return
				}
				if l.Fence() <= lastFence {
					t.Errorf("goroutine %d: fence %d after %d", g, l.Fence(), lastFence)
				}
				lastFence = l.Fence()
				if fail("fenced release", l.Release(ctx)) {
					return
				}
				// reentrant, twice deep
				re, err := c.NewReentrant(own+":re", "owner", wait...)
				if fail("reentrant", err) || fail("reentrant 1", re.Acquire(ctx)) || fail("reentrant 2", re.Acquire(ctx)) ||
					fail("reentrant release 2", re.Release(ctx)) || fail("reentrant release 1", re.Release(ctx)) {
					return
				}
				// contended: fair, write, read, multi on the shared keys
				switch r % 4 {
				case 0:
					l, err = c.Acquire(ctx, sk+":fair", append(wait, redlock.WithFair())...)
					if fail("fair", err) {
						return
					}
					done := hold(shared, 0)
					done()
				case 1:
					l, err = c.AcquireWrite(ctx, sk+":rw", wait...)
					if fail("write", err) {
						return
					}
					done := hold(shared, 1)
					done()
				case 2:
					l, err = c.AcquireRead(ctx, sk+":rw", wait...)
					if fail("read", err) {
						return
					}
				case 3:
					l, err = c.AcquireMulti(ctx, []string{own + ":m", sk + ":m"}, wait...)
					if fail("multi", err) {
						return
					}
				}
				if fail("contended release", l.Release(ctx)) {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	most := <-sampled
	if t.Failed() {
		return
	}

	for i, s := range servers {
		st := pools[i].stats()
		lock, all := connsNamed(t, s, name)
		t.Logf("master %d: at most %d lock connections during the load; now %d lock, %d in all; the pool: %d active, %d idle; %v dials",
			i, most[i], lock, all, st.ActiveCount, st.IdleCount, dialsOf(pools[i]))
		if wantPipelined {
			// One pipelined connection carries the locks, and the
			// client's first call's run_id probe (duplicate masters): the
			// user's pool lends nothing.
			if most[i] > 1 || lock > 1 {
				t.Errorf("master %d: %d lock connections during the load, %d after it; want 1: pipelined", i, most[i], lock)
			}
			if st.ActiveCount != 0 || st.IdleCount != 0 {
				t.Errorf("master %d: the user's pool holds %d connections (%d idle), want none: pipelined", i, st.ActiveCount, st.IdleCount)
			}
		} else if most[i] < 2 {
			t.Errorf("master %d: at most %d lock connections during the load: the pooled path borrows one per command in flight", i, most[i])
		}
	}

	// Waiters of another client on the same pools are woken by the
	// releases: their subscriber dials through the same pools.
	t.Run("wake", func(t *testing.T) {
		rs := &realSet{servers: servers, pools: plain}
		path := pooledPath
		if pipelining {
			path = pipelinedPath
		}
		l, err := c.Acquire(ctx, "wake", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		expectWake(t, path, rs, []string{"wake"}, func(c *redlock.Client) (func(context.Context) error, error) {
			return releaser(c.Acquire(ctx, "wake", redlock.WithWait(time.Hour)))
		}, l.Release)
		wl, err := c.AcquireWrite(ctx, "wake:rw", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		expectWake(t, path, rs, []string{"wake:rw"}, func(c *redlock.Client) (func(context.Context) error, error) {
			return releaser(c.AcquireRead(ctx, "wake:rw", redlock.WithWait(time.Hour)))
		}, wl.Release)
		held, err := c.Acquire(ctx, "wake:b", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		expectWake(t, path, rs, []string{"wake:a", "wake:b"}, func(c *redlock.Client) (func(context.Context) error, error) {
			return releaser(c.AcquireMulti(ctx, []string{"wake:a", "wake:b"}, redlock.WithWait(time.Hour)))
		}, held.Release)
	})

	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs")
	}
	// Nothing is left on the masters but what the user's pools keep idle
	// (nothing, when every client pipelined; the waiting client of the
	// wake check runs on the path the test does), and nothing is still
	// lent.
	waitUntil(t, "Close left no connection on the masters", func() bool {
		for i, s := range servers {
			if _, all := connsNamed(t, s, name); all != pools[i].stats().IdleCount {
				return false
			}
		}
		return true
	})
	for i := range pools {
		if st := pools[i].stats(); st.ActiveCount != st.IdleCount {
			t.Errorf("master %d: after Close the user's pool still lends %d connections", i, st.ActiveCount-st.IdleCount)
		}
	}
}

func dialsOf(p userPool) any {
	if p.dials == nil {
		return "?"
	}
	return p.dials.Load()
}
