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
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// A release that returned nil must leave the key free for others: another
// client's TryAcquire must succeed within a bound. These tests hold an
// acquisition's command in the network (a proxy) past the release, so
// that it may run on a master after the release's "not this token" there,
// and keep a master that granted the lock from hearing the release.

// cmdKey is the key a command acts on: a SET's first argument, an
// EVALSHA's or EVAL's first key.
func cmdKey(cmd []string) string {
	switch {
	case (cmd[0] == "SET" || cmd[0] == "GET" || cmd[0] == "DEL") && len(cmd) > 1:
		return cmd[1]
	case (cmd[0] == "EVALSHA" || cmd[0] == "EVAL") && len(cmd) > 3:
		return cmd[3]
	}
	return ""
}

// delayFirst is a hook that holds the first command on key until open
// closes (or the test ends), then runs it on the master: a command that
// the network delivers late, after its connection was given up.
type delayFirst struct {
	key  string
	skip atomic.Int32 // commands on key to let through before the held one
	open chan struct{}
	once sync.Once
	held atomic.Bool // the held command was read
	ran  chan struct{}
}

func newDelayFirst(key string) *delayFirst {
	return &delayFirst{key: key, open: make(chan struct{}), ran: make(chan struct{})}
}

func (d *delayFirst) hook(c *hostile.Conn, cmd []string) hostile.Verdict {
	if cmdKey(cmd) != d.key || d.skip.Add(-1) >= 0 || !d.held.CompareAndSwap(false, true) {
		return hostile.Forward
	}
	select {
	case <-d.open:
	case <-c.Quit():
	}
	d.once.Do(func() { close(d.ran) })
	return hostile.Forward
}

// holdAfter is a hook that, once armed, holds every command on key until
// the test ends: a master cut off from the client after it granted.
type holdAfter struct {
	key   string
	armed atomic.Bool
}

func (h *holdAfter) hook(c *hostile.Conn, cmd []string) hostile.Verdict {
	if !h.armed.Load() || cmdKey(cmd) != h.key {
		return hostile.Forward
	}
	<-c.Quit()
	return hostile.HangUp
}

// A lock granted by a quorum of masters (0 to q−1), whose SETs to the
// others are held in the network: masters 1 to q−1 are then cut off (they
// keep the token until its TTL), the release runs, and the held SETs reach
// their masters after it. If the release returned nil, another client must
// be able to take the key within seconds — a release that counted the
// "not this token" of a master where the lock's own SET could still run
// as final leaves the token on N−1 masters for the whole TTL. Both paths,
// N=3 and N=5; on the pipelined one the release waits until the
// connections that carry the held SETs were given up and others dialled,
// so that the release does not queue behind them.
func TestRelease_nilMeansOthersCanTakeItDespiteALateSet(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		for _, n := range []int{3, 5} {
			t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
				t.Parallel() // its own masters, proxies and clients; bounds of seconds
				releaseDespiteLateSets(t, path, n)
			})
		}
	})
}

func releaseDespiteLateSets(t *testing.T, path connPath, n int) {
	q := n/2 + 1
	servers := redistest.Start(t, n)
	key := fmt.Sprintf("late:set:%d", n)
	h := &holdAfter{key: key}
	addrs := []string{servers[0].Addr()}
	direct := []string{servers[0].Addr()}
	for i := 1; i < q; i++ {
		addrs = append(addrs, hostile.NewProxy(t, servers[i].Addr(), h.hook).Addr())
		direct = append(direct, servers[i].Addr())
	}
	var delays []*delayFirst
	var proxies []*hostile.Proxy
	for i := q; i < n; i++ {
		d := newDelayFirst(key)
		p := hostile.NewProxy(t, servers[i].Addr(), d.hook)
		delays, proxies = append(delays, d), append(proxies, p)
		addrs = append(addrs, p.Addr())
		direct = append(direct, servers[i].Addr())
	}
	opened := false
	open := func() {
		if !opened {
			opened = true
			for _, d := range delays {
				close(d.open)
			}
		}
	}
	t.Cleanup(open)
	c := addrClient(t, path, addrs)
	other := addrClient(t, path, direct)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	warm, err := c.TryAcquire(ctx, "late:warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	accepted := make([]int, len(proxies))
	for i, p := range proxies {
		accepted[i] = p.Accepted()
	}
	l, err := c.TryAcquire(ctx, key, redlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire with masters %d-%d's SETs held: %v", q, n-1, err)
	}
	// TryAcquire returns at a quorum: the SETs may reach the proxies later.
	waitUntil(t, "the SETs are held", func() bool {
		for _, d := range delays {
			if !d.held.Load() {
				return false
			}
		}
		return true
	})
	if path.pipelined {
		// Until the connections that carry the held SETs are given up
		// and others dialled: drive other keys through the client.
		redialled := func() bool {
			for i, p := range proxies {
				if p.Accepted() == accepted[i] {
					return false
				}
			}
			return true
		}
		deadline := time.Now().Add(20 * time.Second)
		for i := 0; !redialled(); i++ {
			if time.Now().After(deadline) {
				t.Fatal("the connections to the delayed masters were not re-dialled in 20 s")
			}
			if w, err := c.TryAcquire(ctx, fmt.Sprintf("late:drive:%d", i)); err == nil {
				_ = w.Release(ctx)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	h.armed.Store(true)
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	start := time.Now()
	relErr := l.Release(rctx)
	rcancel()
	t.Logf("%s N=%d: Release after %v: %v", path.name, n, time.Since(start), relErr)
	setsBefore := make([]int, n-q)
	for i, s := range servers[q:] {
		setsBefore[i] = s.Calls("set")
	}
	open()
	for _, d := range delays {
		select {
		case <-d.ran:
		case <-time.After(10 * time.Second):
			t.Fatal("a held SET was not let through in 10 s")
		}
	}
	// The held SETs run once their hooks return; wait until they did
	// (they put the token back, or find the key taken). Not until the
	// token is there: a retry of the release may take it away at once.
	if !redistest.Within(10*time.Second, func() bool {
		for i, s := range servers[q:] {
			if s.Calls("set") == setsBefore[i] {
				return false
			}
		}
		return true
	}) {
		t.Logf("a held SET had not run on its master 10 s after it was let through")
	}
	var vals []string
	for _, s := range servers {
		v, _ := redis.String(s.Do("GET", key))
		vals = append(vals, v)
	}
	t.Logf("after the held SETs: masters hold %q (token %q)", vals, l.Token())
	if relErr != nil {
		if !errors.Is(relErr, redlock.ErrNotReleased) {
			t.Errorf("Release: %v, want nil or ErrNotReleased", relErr)
		}
		return
	}
	taken := false
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		l2, err := other.TryAcquire(ctx, key, redlock.WithTTL(5*time.Second))
		if err == nil {
			taken = true
			_ = l2.Release(ctx)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !taken {
		t.Errorf("Release returned nil, yet no other client could take the key for 5 s: masters hold %q (token %q)", vals, l.Token())
	}
}

// A master that answers a release with something that is not 1 or 0 has
// not confirmed anything: with master 0 deleting the lock and master 1
// cut off, a garbage answer from master 2 must not make up the quorum.
// Both paths, N=3, several kinds of garbage.
func TestRelease_garbageAnswerNeverCountsAsFree(t *testing.T) {
	redistest.SkipShort(t)
	garbage := []string{"$-1\r\n", "+OK\r\n", ":2\r\n", ":-1\r\n", "$1\r\n0\r\n", "*1\r\n:0\r\n", "+0\r\n", "_\r\n", "-ERR boom\r\n"}
	forEachPath(t, func(t *testing.T, path connPath) {
		for gi, g := range garbage {
			t.Run(fmt.Sprintf("%q", g), func(t *testing.T) {
				t.Parallel() // its own masters, proxies and client
				servers := redistest.Start(t, 3)
				key := fmt.Sprintf("garbage:%d", gi)
				h := &holdAfter{key: key}
				var armed atomic.Bool
				var answered atomic.Int32
				p1 := hostile.NewProxy(t, servers[1].Addr(), h.hook)
				p2 := hostile.NewProxy(t, servers[2].Addr(), func(c *hostile.Conn, cmd []string) hostile.Verdict {
					if !armed.Load() || cmdKey(cmd) != key {
						return hostile.Forward
					}
					answered.Add(1)
					_ = c.Write(g)
					// Never run: the master keeps the token.
					<-c.Quit()
					return hostile.HangUp
				})
				c := addrClient(t, path, []string{servers[0].Addr(), p1.Addr(), p2.Addr()})
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				// Acquire: a fresh client's first round (through two
				// proxies, beside the other parallel cases) may pass the
				// timeout on a busy machine; what is tested is the release.
				l, err := c.Acquire(ctx, key, redlock.WithTTL(30*time.Second), redlock.WithWait(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				// Acquire returns at a quorum: a third SET that timed out
				// on a busy machine never lands. Put the token there.
				redistest.HoldEverywhere(t, servers, key, l.Token(), 30*time.Second)
				waitUntil(t, "every master holds the lock", func() bool {
					n := 0
					for _, s := range servers {
						if v, _ := redis.String(s.Do("GET", key)); v == l.Token() {
							n++
						}
					}
					return n == 3
				})
				h.armed.Store(true)
				armed.Store(true)
				err = l.Release(ctx)
				t.Logf("%s: %v (master 2 answered garbage %d times)", path.name, err, answered.Load())
				if err == nil {
					t.Fatalf("Release returned nil with one deletion, one master cut off and garbage %q from the third (which still holds the token)", g)
				}
				if errors.Is(err, redlock.ErrNotHeld) {
					t.Errorf("Release: %v, want ErrNotReleased (the lock was held on every master)", err)
				}
			})
		}
	})
}

// Release ends at once when its ctx ends, and Close ends it within what
// Close documents, while the release waits (its longer wait) on stopped
// masters that granted the lock, with the default per-master timeout:
// pipelined, one per-master timeout after Close; pooled, at least a
// second past the release's own deadline. Both paths, N=3 and N=5.
func TestRelease_ctxAndCloseEndItWhileMastersAreStopped(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		for _, n := range []int{3, 5} {
			t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
				for _, how := range []string{"ctx", "close"} {
					t.Run(how, func(t *testing.T) {
						rs := startReal(t, n)
						c, err := redigo.New(rs.pools, testOptions(path, []redlock.Option{redlock.WithTimeout(redlock.DefaultTimeout)})...)
						if err != nil {
							t.Fatal(err)
						}
						defer c.Close()
						ctx := ctxT(t)
						// Acquire, not TryAcquire: a fresh client's first
						// round at the default timeout may fail on a busy
						// machine, and what is tested is the release.
						l, err := c.Acquire(ctx, "stopped:"+how, redlock.WithTTL(30*time.Second))
						if err != nil {
							t.Fatal(err)
						}
						// Stop a quorum of the masters that granted it. Acquire
						// returns at a quorum: on a busy machine the others'
						// SETs may have timed out.
						var holders []int
						waitUntil(t, "a quorum of masters holds the lock", func() bool {
							holders = holders[:0]
							for i, v := range rs.values(t, "stopped:"+how) {
								if v == l.Token() {
									holders = append(holders, i)
								}
							}
							return len(holders) >= n/2+1
						})
						for _, i := range holders[:n/2+1] {
							rs.pause(t, i)
						}
						rctx, cancel := context.WithCancel(context.Background())
						defer cancel()
						done := make(chan error, 1)
						go func() { done <- l.Release(rctx) }()
						// The release has sent its commands once it waits in
						// its round (on the stopped masters, for up to its
						// longer wait).
						if !waitForProbeWaiter(10 * time.Second) {
							t.Fatal("the release does not wait in its round within 10 s")
						}
						start := time.Now()
						var closed chan struct{}
						if how == "ctx" {
							cancel()
						} else {
							closed = make(chan struct{})
							go func() { c.Close(); close(closed) }()
						}
						select {
						case err := <-done:
							took := time.Since(start)
							t.Logf("Release ended %v after %s: %v", took, how, err)
							if err == nil {
								t.Errorf("Release returned nil with a quorum stopped")
							}
							// Pipelined: one per-master timeout. Pooled: the
							// release's deadline (1 s from its start) and a
							// second past it; 500 ms of slack for a busy host.
							bound := redlock.DefaultTimeout + 500*time.Millisecond
							if how == "ctx" {
								bound = 300 * time.Millisecond
							} else if !path.pipelined {
								bound = 2*time.Second + 500*time.Millisecond
							}
							if took > bound {
								t.Errorf("Release ended %v after %s, want within %v", took, how, bound)
							}
						case <-time.After(5 * time.Second):
							t.Fatalf("Release still running 5 s after %s", how)
						}
						if closed != nil {
							select {
							case <-closed:
								t.Logf("Close took %v", time.Since(start))
							case <-time.After(5 * time.Second):
								t.Fatalf("Close still running 5 s later with stopped masters")
							}
						}
					})
				}
			})
		}
	})
}

// Master 2 of three is stopped (SIGSTOP) while the lock is taken, so its
// SET waits in its buffers; the lock is granted by masters 0 and 1. Master
// 1 is then stopped too, and master 2 resumed while the release waits. If
// the release returns nil, another client must take the key on masters 0
// and 2 within seconds: master 2's SET must not run after a 0 that the
// release counted. Both paths.
func TestRelease_nilMeansOthersCanTakeItAfterAMasterStoppedMidAcquisition(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		other := rs.client(t, path)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		const key = "stopped:mid"
		for _, cl := range []*redlock.Client{c, other} {
			w, err := cl.TryAcquire(ctx, "stopped:mid:warm")
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		rs.pause(t, 2)
		l, err := c.TryAcquire(ctx, key, redlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatalf("TryAcquire with master 2 stopped: %v", err)
		}
		waitUntil(t, "masters 0 and 1 hold the lock", func() bool {
			for _, s := range rs.servers[:2] {
				if v, _ := redis.String(s.Do("GET", key)); v != l.Token() {
					return false
				}
			}
			return true
		})
		rs.pause(t, 1)
		resumed := make(chan struct{})
		go func() {
			defer close(resumed)
			time.Sleep(100 * time.Millisecond) // into the release's wait
			_ = rs.servers[2].Resume()
		}()
		start := time.Now()
		relErr := l.Release(ctx)
		<-resumed
		t.Logf("%s: Release after %v: %v", path.name, time.Since(start), relErr)
		if relErr != nil {
			if !errors.Is(relErr, redlock.ErrNotReleased) {
				t.Errorf("Release: %v, want nil or ErrNotReleased", relErr)
			}
			return
		}
		taken := false
		var last error
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			l2, err := other.TryAcquire(ctx, key, redlock.WithTTL(5*time.Second))
			if err == nil {
				taken = true
				_ = l2.Release(ctx)
				break
			}
			last = err
			time.Sleep(100 * time.Millisecond)
		}
		if !taken {
			v, _ := redis.String(rs.servers[2].Do("GET", key))
			t.Errorf("Release returned nil, yet no other client could take the key on masters 0 and 2 for 5 s (master 2 holds %q, token %q): %v", v, l.Token(), last)
		}
	})
}
