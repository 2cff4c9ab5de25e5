package redlock_test

// Attacks on the validity rule (docs/safety.md, "Expiry changes that no
// quorum confirmed") and on the lock's lifetime: sequences that try to let
// a second client take a key while the first lock's Until() is still in
// the future, to make Lost()/Until() disagree with the masters, or to
// panic or hang. Real masters throughout.

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// gatedPool is a pool (without Dial, so the client takes the pooled path)
// whose next few GetContext calls wait for a gate: a worker that is slow
// to get a connection, as behind a full pool (MaxActive with Wait).
type gatedPool struct {
	inner pool.Pool
	mu    sync.Mutex
	held  int           // calls still to hold
	gate  chan struct{} // closed to let the held calls through
}

func (p *gatedPool) GetContext(ctx context.Context) (redis.Conn, error) {
	p.mu.Lock()
	gate := p.gate
	hold := p.held > 0
	if hold {
		p.held--
	}
	p.mu.Unlock()
	if hold {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return p.inner.GetContext(ctx)
}

// hold makes the next n calls wait until open is called.
func (p *gatedPool) hold(n int) (open func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = n
	p.gate = make(chan struct{})
	g := p.gate
	var once sync.Once
	return func() { once.Do(func() { close(g) }) }
}

// watchOverlap lets other try to take key for d: when it succeeds, l's
// validity must have ended and l must say so. It reports whether the key
// was taken.
func watchOverlap(t *testing.T, ctx context.Context, other *redlock.Client, l *redlock.Lock, key string, d time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		l2, err := other.TryAcquire(ctx, key, redlock.WithTTL(10*time.Second))
		if err == nil {
			takenAt := time.Now()
			t.Cleanup(func() { _ = l2.Release(context.Background()) })
			checkNoOverlap(t, l, takenAt)
			return true
		}
		if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("second client: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // the subject: the second client polls every 20 ms
	}
	return false
}

// A failed Extend whose commands are still on their way (the caller's ctx
// ended before the pooled workers got a connection) must not be overtaken
// on a master by a later Extend: else the short TTL lands last, and the
// later Extend's validity is a lie.
func TestLockExtend_pooledLateShortExtendAfterLongerOne(t *testing.T) {
	rs := startReal(t, 3)
	gated := make([]pool.Pool, 3)
	gp := make([]*gatedPool, 3)
	for i, p := range rs.pools {
		gp[i] = &gatedPool{inner: p}
		gated[i] = gp[i]
	}
	c, err := redigo.New(gated, redlock.WithTimeout(time.Second), redigo.WithPipelining(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	other := rs.client(t, pooledPath)
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "k", redlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	opens := make([]func(), 3)
	for i := range gp {
		opens[i] = gp[i].hold(1)
	}
	openAll := func() {
		for _, open := range opens {
			open()
		}
	}
	t.Cleanup(openAll)
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	err = l.Extend(short, 1500*time.Millisecond)
	cancel()
	if !errors.Is(err, redlock.ErrNotExtended) {
		t.Fatalf("Extend whose ctx ended first = %v, want ErrNotExtended", err)
	}
	// The later Extend is either ordered after the first one on every
	// master or fails; both are fine. What must not happen is the first
	// one's PEXPIRE 1500 landing after it.
	longErr := l.Extend(ctx, 30*time.Second)
	openAll()
	t.Logf("later Extend: %v; Until in %v", longErr, time.Until(l.Until()).Round(time.Millisecond))
	if !watchOverlap(t, ctx, other, l, "k", 3*time.Second) && longErr != nil {
		t.Logf("nobody else took the key")
	}
}

// delayProxy forwards connections to a real master, and can hold back the
// next command sent on any of them (and whatever follows it on that
// connection) until release: a command delayed in the network, or in the
// socket of a frozen master that, when it resumes, runs another
// connection's commands first (real redis-server does so after
// SIGSTOP/SIGCONT, about one time in five). Nothing is lost: a held
// command reaches the master even when the client closed its connection
// meanwhile, as the bytes of a closed socket do.
type delayProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu       sync.Mutex
	holdNext int
	held     []*proxyConn // in the order their first chunk was held
	conns    map[*proxyConn]struct{}
	closed   bool
}

type proxyConn struct {
	client, up net.Conn
	// Guarded by the proxy's mu:
	holding bool     // chunks are held, not forwarded
	chunks  [][]byte // held, in order
	eof     bool     // the client closed while chunks were held
}

func newDelayProxy(t *testing.T, target string) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		cl, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			cl.Close()
			continue
		}
		pc := &proxyConn{client: cl, up: up}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			cl.Close()
			up.Close()
			return
		}
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(cl, up)
			cl.Close()
		}()
		go p.forward(pc)
	}
}

// forward copies the client's commands to the master, holding them when
// told to.
func (p *delayProxy) forward(pc *proxyConn) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := pc.client.Read(buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			p.mu.Lock()
			if !pc.holding && p.holdNext > 0 {
				p.holdNext--
				pc.holding = true
				p.held = append(p.held, pc)
			}
			if pc.holding {
				pc.chunks = append(pc.chunks, chunk)
				p.mu.Unlock()
				continue
			}
			p.mu.Unlock()
			if _, err := pc.up.Write(chunk); err != nil {
				return
			}
		}
		if err != nil {
			p.mu.Lock()
			if pc.holding {
				pc.eof = true // release closes it after the held bytes
			} else {
				pc.up.Close()
			}
			p.mu.Unlock()
			return
		}
	}
}

// hold makes the proxy hold the next command sent on any connection, and
// everything after it on that connection.
func (p *delayProxy) hold() {
	p.mu.Lock()
	p.holdNext++
	p.mu.Unlock()
}

// release sends what was held to the master, in order, and closes the
// connections whose client went away meanwhile.
func (p *delayProxy) release() {
	p.mu.Lock()
	held := p.held
	p.held, p.holdNext = nil, 0
	for _, pc := range held {
		for _, c := range pc.chunks {
			_, _ = pc.up.Write(c)
		}
		pc.chunks, pc.holding = nil, false
		if pc.eof {
			pc.up.Close()
		}
	}
	p.mu.Unlock()
}

func (p *delayProxy) close() {
	p.mu.Lock()
	p.closed = true
	for pc := range p.conns {
		pc.client.Close()
		pc.up.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// proxiedClient returns a client whose masters are reached through delay
// proxies, and the proxies.
func proxiedClient(t *testing.T, rs *realSet, opts []redlock.Option) (*redlock.Client, []*delayProxy) {
	t.Helper()
	proxies := make([]*delayProxy, len(rs.servers))
	pools := make([]pool.Pool, len(rs.servers))
	for i, s := range rs.servers {
		proxies[i] = newDelayProxy(t, s.Addr())
		p, err := pool.New(proxies[i].addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		pools[i] = p
	}
	c, err := redigo.New(pools, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Cleanup(func() {
		for _, p := range proxies {
			p.release()
		}
	})
	return c, proxies
}

// extendLong extends l to 30 s, trying again when a master was too slow
// for the short per-master timeout on a loaded machine.
func extendLong(t *testing.T, ctx context.Context, l *redlock.Lock) {
	t.Helper()
	var err error
	// Five tries at least, and for 3 s: the commands it follows on a
	// master whose reply is held are given up a second past their
	// deadline (pooled reads, lateBound) or with their connection.
	for i, deadline := 0, time.Now().Add(3*time.Second); i < 5 || time.Now().Before(deadline); i++ {
		if err = l.Extend(ctx, 30*time.Second); !errors.Is(err, redlock.ErrNotExtended) {
			break
		}
	}
	if err != nil {
		t.Fatalf("Extend to 30s: %v", err)
	}
}

// waitPTTL polls key's PTTL on the masters at idx until ok accepts each.
func waitPTTL(t *testing.T, rs *realSet, key string, ok func(ms int64) bool, idx ...int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, i := range idx {
		for {
			ms, err := redis.Int64(rs.servers[i].Do("PTTL", key))
			if err != nil {
				t.Fatal(err)
			}
			if ok(ms) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("master %d: PTTL %d ms", i, ms)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// acquireOnEvery acquires key with c and waits until every master of rs
// holds it. Acquire returns at a quorum, and on a busy machine the last
// master's SET may not go at all (a round settled without it): then the
// lock is released and taken again, a few times at most.
func acquireOnEvery(t *testing.T, ctx context.Context, rs *realSet, c *redlock.Client, key string, ttl time.Duration) *redlock.Lock {
	t.Helper()
	for try := 0; try < 5; try++ {
		l, err := c.Acquire(ctx, key, redlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		if redistest.Within(2*time.Second, func() bool {
			for _, s := range rs.servers {
				if ms, err := redis.Int64(s.Do("PTTL", key)); err != nil || ms <= 0 {
					return false
				}
			}
			return true
		}) {
			return l
		}
		t.Logf("try %d: not every master holds %q; taking it again", try, key)
		_ = l.Release(ctx)
	}
	t.Fatalf("no acquisition of %q reached every master in five tries", key)
	return nil
}

// waitGivenUp waits, on the pipelined path, until c has given up its
// stalled connections and keeps only want.
func waitGivenUp(t *testing.T, path connPath, c *redlock.Client, want int) {
	t.Helper()
	if !path.pipelined {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, _, n := c.Sizes(); n <= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the stalled pipelined connections were never given up")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An Extend to a shorter TTL whose command is delayed on its way to two
// of three masters fails; a later Extend to a longer TTL succeeds on all
// three; then the delayed command arrives and runs last. On the pooled
// path the later Extend goes out on another connection once the delayed
// command's read was given up (a second past its deadline); on the
// pipelined one on a new connection once the stalled one was given up
// (after a second). Either way two masters end with the short
// TTL, so the later Extend must not have promised more than it.
func TestLockExtend_delayedShortExtendLandsAfterLongerOne(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		t.Parallel() // its own masters and proxies; waits bounded by seconds only
		rs := startReal(t, 3)
		c, proxies := proxiedClient(t, rs, testOptions(path, []redlock.Option{redlock.WithTimeout(100 * time.Millisecond)}))
		other := rs.client(t, path)
		ctx := ctxT(t)
		// The acquisition's last commands are through: the next ones held
		// are the Extend's.
		l := acquireOnEvery(t, ctx, rs, c, "k", 10*time.Second)
		proxies[0].hold()
		proxies[1].hold()
		const short = 3 * time.Second
		if err := l.Extend(ctx, short); !errors.Is(err, redlock.ErrNotExtended) {
			t.Fatalf("Extend with two masters' commands held = %v, want ErrNotExtended", err)
		}
		// The pipelined path gives the stalled connections up after a second.
		waitGivenUp(t, path, c, 1)
		// Extend until the long TTL reached both delayed masters: one whose
		// earlier command was still in flight may have been left out of an
		// extension that succeeded without it (down is beyond the host).
		reached := func() bool {
			for _, i := range []int{0, 1} {
				if ms, err := redis.Int64(rs.servers[i].Do("PTTL", "k")); err != nil || ms <= 25000 {
					return false
				}
			}
			return true
		}
		for try := 0; ; try++ {
			extendLong(t, ctx, l)
			if redistest.Within(time.Second, reached) {
				break
			}
			if try == 5 {
				t.Fatal("no long Extend reached both delayed masters in six tries")
			}
		}
		proxies[0].release()
		proxies[1].release()
		released := time.Now()
		t.Logf("Until in %v when the delayed PEXPIRE %d arrives", time.Until(l.Until()).Round(time.Millisecond), short.Milliseconds())
		if watchOverlap(t, ctx, other, l, "k", short+2*time.Second) {
			t.Logf("the key was taken %v after the delayed command arrived", time.Since(released).Round(time.Millisecond))
		}
	})
}

// A command that was late but answered is settled: it ran before the next
// round was sent, so it does not limit that round. (Pipelined: the late
// reply still reaches the round; the pooled path's worker gives up at the
// per-master timeout, and that master stays limited.)
func TestLockExtend_lateAnswerSettlesInFlight(t *testing.T) {
	rs := startReal(t, 3)
	c, proxies := proxiedClient(t, rs, []redlock.Option{redlock.WithTimeout(300 * time.Millisecond), redigo.WithPipelining(true)})
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "k", redlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The acquisition's last commands are through: the next ones held
	// are the Extend's.
	waitPTTL(t, rs, "k", func(ms int64) bool { return ms > 0 }, 0, 1, 2)
	proxies[0].hold()
	proxies[1].hold()
	if err := l.Extend(ctx, 3*time.Second); !errors.Is(err, redlock.ErrNotExtended) {
		t.Fatalf("Extend with two masters' commands held = %v, want ErrNotExtended", err)
	}
	proxies[0].release()
	proxies[1].release()
	waitPTTL(t, rs, "k", func(ms int64) bool { return ms <= 3000 }, 0, 1)
	time.Sleep(200 * time.Millisecond) // the late answers come back
	extendLong(t, ctx, l)
	if left := time.Until(l.Until()); left < 25*time.Second {
		t.Errorf("after the earlier extension was answered, a confirmed 30s extension left %v", left)
	}
}

// After Release another client may take the key at once: the released
// lock's Until must not still lie in the future then.
func TestLockRelease_untilEndsWhenReleased(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		other := rs.client(t, path)
		ctx := ctxT(t)
		for _, withLost := range []bool{false, true} {
			l, err := c.Acquire(ctx, "k", redlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if withLost {
				_ = l.Lost()
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l2, err := other.TryAcquire(ctx, "k", redlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatalf("after Release: %v", err)
			}
			checkNoOverlap(t, l, time.Now())
			if err := l2.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A lock lost to its maximum hold time is lost for good: Extend does not
// bring it back (it would outlive the cap, with Lost closed), and Until
// does not claim validity past the loss.
func TestMaxHold_extendAfterLossFails(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		ctx := ctxT(t)
		l, err := c.Acquire(ctx, "k", redlock.WithTTL(3*time.Second), redlock.WithAutoExtend(0),
			redlock.WithMaxHold(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("not lost after the maximum hold time")
		}
		lostAt := time.Now()
		if !errors.Is(l.Err(), redlock.ErrMaxHold) {
			t.Fatalf("Err = %v, want ErrMaxHold", l.Err())
		}
		err = l.Extend(ctx, 30*time.Second)
		if !errors.Is(err, redlock.ErrLockLost) {
			t.Errorf("Extend after the maximum hold time = %v, want ErrLockLost", err)
		}
		if u := l.Until(); u.After(lostAt) {
			t.Errorf("Until is %v after the lock was lost", u.Sub(lostAt))
		}
	})
}

// The watcher declares the lock lost when its validity runs out while an
// Extend sent just before is still waiting for its answer; the answer
// then confirms the extension. The lock stays lost: Extend says so, and
// Until does not move past the loss (Lost is closed for good).
func TestLock_Extend_confirmedAfterWatcherDeclaredLoss(t *testing.T) {
	fs := newFakes(t, 1)
	ctx := context.Background()
	l, err := fs.client.TryAcquire(ctx, "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	// Once without a delay: the master loads the script (EVAL after
	// NOSCRIPT), so that the delayed Extend is one command.
	if err := l.Extend(ctx, fakeTTL); err != nil {
		t.Fatal(err)
	}
	lost := l.Lost()
	fs.clk.Advance(l.Until().Sub(fs.clk.Now()) - 20*time.Millisecond)
	fs.masters[0].SetDelay(50 * time.Millisecond) // runs at once, answers 50 ms later
	done := make(chan error, 1)
	go func() { done <- l.Extend(ctx, fakeTTL) }()
	// The watcher's timer, the round's timeout, and the master's reply
	// deadline and delayed answer.
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := fs.clk.BlockUntil(bctx, 4); err != nil {
		t.Fatal(err)
	}
	fs.clk.Advance(30 * time.Millisecond)
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher did not see the validity run out")
	}
	fs.clk.Advance(30 * time.Millisecond)
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Extend did not return after its answer came")
	}
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("Extend confirmed after the loss = %v, want ErrLockLost", err)
	}
	if now := fs.clk.Now(); l.Until().After(now) {
		t.Errorf("Until is %v ahead although Lost is closed (%v)", l.Until().Sub(now), l.Err())
	}
}

// The rule for every lock kind's extension: an Extend to a shorter TTL
// held in the sockets of two frozen masters fails, the masters run it
// when they resume, and a second client that then takes the key (in the
// kind's conflicting mode) finds the first lock's validity already over.
func TestExtend_unconfirmedShorterTTLEveryKind(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, path connPath) {
		type acquireFunc func(ctx context.Context, c *redlock.Client, opts ...redlock.LockOption) (*redlock.Lock, error)
		plain := func(ctx context.Context, c *redlock.Client, opts ...redlock.LockOption) (*redlock.Lock, error) {
			return c.TryAcquire(ctx, "k", opts...)
		}
		for _, tc := range []struct {
			name        string
			first, then acquireFunc
		}{
			{"read then write", func(ctx context.Context, c *redlock.Client, opts ...redlock.LockOption) (*redlock.Lock, error) {
				return c.AcquireRead(ctx, "k", opts...)
			}, func(ctx context.Context, c *redlock.Client, opts ...redlock.LockOption) (*redlock.Lock, error) {
				return c.AcquireWrite(ctx, "k", append(opts, redlock.WithWait(0))...)
			}},
			{"write then read", func(ctx context.Context, c *redlock.Client, opts ...redlock.LockOption) (*redlock.Lock, error) {
				return c.AcquireWrite(ctx, "k", opts...)
			}, func(ctx context.Context, c *redlock.Client, opts ...redlock.LockOption) (*redlock.Lock, error) {
				return c.AcquireRead(ctx, "k", append(opts, redlock.WithWait(0))...)
			}},
			{"multi then plain", func(ctx context.Context, c *redlock.Client, opts ...redlock.LockOption) (*redlock.Lock, error) {
				return c.AcquireMulti(ctx, []string{"j", "k"}, opts...)
			}, plain},
			{"fenced then plain", func(ctx context.Context, c *redlock.Client, opts ...redlock.LockOption) (*redlock.Lock, error) {
				return c.Acquire(ctx, "k", append(opts, redlock.WithFencing())...)
			}, plain},
			{"fair then fair", func(ctx context.Context, c *redlock.Client, opts ...redlock.LockOption) (*redlock.Lock, error) {
				return c.Acquire(ctx, "k", append(opts, redlock.WithFair())...)
			}, func(ctx context.Context, c *redlock.Client, opts ...redlock.LockOption) (*redlock.Lock, error) {
				return c.TryAcquire(ctx, "k", append(opts, redlock.WithFair())...)
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel() // its own masters to freeze; no duration bounded from above
				rs := startReal(t, 3)
				c := rs.client(t, path, redlock.WithTimeout(200*time.Millisecond))
				other := rs.client(t, path, redlock.WithTimeout(200*time.Millisecond))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				l, err := tc.first(ctx, c, redlock.WithTTL(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				_ = l.Lost()
				resume := pauseMasters(t, rs, 1, 2)
				err = l.Extend(ctx, 1500*time.Millisecond)
				sent := time.Now()
				if !errors.Is(err, redlock.ErrNotExtended) {
					t.Fatalf("Extend with a frozen majority = %v, want ErrNotExtended", err)
				}
				if left := l.Until().Sub(sent); left > 1500*time.Millisecond {
					t.Errorf("after an unconfirmed extension to 1.5s, Until is %v away", left)
				}
				resume()
				takenAt := takeOver(t, 12*time.Second, func() error {
					l2, err := tc.then(ctx, other, redlock.WithTTL(10*time.Second))
					if err == nil {
						t.Cleanup(func() { _ = l2.Release(context.Background()) })
					}
					return err
				})
				t.Logf("taken %v after the unconfirmed extension", takenAt.Sub(sent).Round(time.Millisecond))
				checkNoOverlap(t, l, takenAt)
			})
		}
	})
}

// A storm on one auto-extended lock: goroutines extend it to random TTLs
// with random deadlines, read Until, Lost and Err, while masters freeze
// and resume, and another client keeps trying to take the key; then two
// Releases race. Nothing may panic or hang, and whenever the other client
// holds the key the first lock's Until must already be over.
func TestLock_storm(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path, redlock.WithTimeout(100*time.Millisecond))
		other := rs.client(t, path, redlock.WithTimeout(100*time.Millisecond))
		ctx := ctxT(t)
		l, err := c.Acquire(ctx, "k", redlock.WithTTL(time.Second), redlock.WithAutoExtend(0))
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := 0; g < 6; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ectx, cancel := context.WithTimeout(ctx, time.Duration(rand.N(150))*time.Millisecond)
					ttl := 300*time.Millisecond + time.Duration(rand.N(2700))*time.Millisecond
					err := l.Extend(ectx, ttl)
					cancel()
					if err != nil && !errors.Is(err, redlock.ErrNotExtended) && !errors.Is(err, redlock.ErrLockLost) &&
						!errors.Is(err, redlock.ErrNotHeld) {
						t.Errorf("Extend: %v", err)
					}
					_, _, _ = l.Until(), l.Lost(), l.Err()
				}
			}()
		}
		wg.Add(1)
		taken := 0
		go func() { // the other client
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l2, err := other.TryAcquire(ctx, "k", redlock.WithTTL(time.Second))
				if err != nil {
					time.Sleep(10 * time.Millisecond) // the subject: the other client's pace between tries
					continue
				}
				takenAt := time.Now()
				if u := l.Until(); u.After(takenAt) {
					t.Errorf("the other client holds the key while the first lock is valid for %v more", u.Sub(takenAt))
				}
				taken++
				_ = l2.Release(ctx)
			}
		}()
		// One master frozen at a time, then two (the extensions fail; the
		// short TTLs they carry run when the masters resume).
		for _, idx := range [][]int{{1}, {2}, {1, 2}, {0}, {0, 2}} {
			resume := pauseMasters(t, rs, idx...)
			time.Sleep(time.Duration(100+rand.N(900)) * time.Millisecond) // the subject: a random spell of the schedule
			resume()
			time.Sleep(time.Duration(rand.N(500)) * time.Millisecond) // the subject: a random spell of the schedule
		}
		var rel sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			rel.Add(1)
			go func() {
				defer rel.Done()
				errs[i] = l.Release(ctx)
			}()
		}
		rel.Wait()
		close(stop)
		wg.Wait()
		if n := errors.Is(errs[0], redlock.ErrNotHeld) || errors.Is(errs[0], redlock.ErrNotReleased); !n && !errors.Is(errs[1], redlock.ErrNotHeld) {
			t.Errorf("Release, Release = %v, %v; want at least one ErrNotHeld", errs[0], errs[1])
		}
		select {
		case <-l.Lost():
		default:
			t.Fatal("Lost not closed after Release")
		}
		if !errors.Is(l.Err(), redlock.ErrLockLost) {
			t.Errorf("Err = %v", l.Err())
		}
		if u := l.Until(); u.After(time.Now()) {
			t.Errorf("Until %v ahead after Release", time.Until(u))
		}
		if err := l.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrNotHeld) {
			t.Errorf("Extend after Release = %v", err)
		}
		t.Logf("the other client took the key %d times; lost: %v", taken, l.Err())
	})
}

// A reentrant owner's hold that was lost is taken over by the owner's
// next hold, and the lost hold's commands still in flight do not apply to
// it (they carry the lost hold's id). An Extend to a shorter TTL held
// back on two masters, the hold lost when that shorter validity ran out,
// the owner taking the lock anew at once: when the held command arrives
// it leaves the new hold alone, and no other owner takes the key while
// the new hold is valid.
func TestReentrant_newHoldAfterLossAllowsForOldCommandsInFlight(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		t.Parallel() // its own masters and proxies; waits bounded by seconds only
		rs := startReal(t, 3)
		c, proxies := proxiedClient(t, rs, testOptions(path, []redlock.Option{redlock.WithTimeout(100 * time.Millisecond)}))
		other := rs.client(t, path)
		ctx := ctxT(t)
		r, err := c.NewReentrant("k", "owner", redlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		l := r.Lock()
		lost := l.Lost()
		// The acquisition's last commands are through: the next ones held
		// are the Extend's.
		waitPTTL(t, rs, "k", func(ms int64) bool { return ms > 0 }, 0, 1, 2)
		proxies[0].hold()
		proxies[1].hold()
		const short = 2 * time.Second
		if err := l.Extend(ctx, short); !errors.Is(err, redlock.ErrNotExtended) {
			t.Fatalf("Extend with two masters' commands held = %v, want ErrNotExtended", err)
		}
		select {
		case <-lost:
		case <-time.After(5 * time.Second):
			t.Fatal("the hold was not lost when its shortened validity ran out")
		}
		if err := r.Acquire(ctx); err != nil {
			t.Fatalf("taking the lock anew: %v", err)
		}
		waitPTTL(t, rs, "k", func(ms int64) bool { return ms > 9000 }, 0, 1) // it reached them
		proxies[0].release()
		proxies[1].release()
		r2, err := other.NewReentrant("k", "second", redlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(short + 2*time.Second)
		for time.Now().Before(deadline) {
			if err := r2.TryAcquire(ctx); err == nil {
				takenAt := time.Now()
				t.Cleanup(func() { _ = r2.Release(context.Background()) })
				checkNoOverlap(t, r.Lock(), takenAt)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		// The held PEXPIRE has run by now (released 4 s ago): the new
		// hold kept its TTL on the masters it held back.
		waitPTTL(t, rs, "k", func(ms int64) bool { return ms > short.Milliseconds() }, 0, 1)
	})
}
