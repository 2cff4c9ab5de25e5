package redlock

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

// attack30Pool is a pool of the user's own (neither a pool.Dialer nor a
// *redis.Pool) over a plain redigo pool: a subscription borrows.
type attack30Pool struct{ p *redis.Pool }

func (a attack30Pool) GetContext(ctx context.Context) (redis.Conn, error) {
	return a.p.GetContext(ctx)
}

func attack30RedisPool(addr string, opts ...redis.DialOption) *redis.Pool {
	return &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", addr, opts...)
	}}
}

// attack30Clean waits for the pool to lend nothing: every connection it
// counts is idle.
func attack30Clean(t *testing.T, what string, stats func() redis.PoolStats) {
	t.Helper()
	if !redistest.WaitFor(ctx5s(t), func() bool { st := stats(); return st.ActiveCount == st.IdleCount }) {
		st := stats()
		t.Errorf("%s: the pool still lends %d connections (%d active, %d idle)", what, st.ActiveCount-st.IdleCount, st.ActiveCount, st.IdleCount)
	}
}

func attack30Close(t *testing.T, what string, sub Subscription) {
	t.Helper()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		sub.Close()
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: Close hangs", what)
	}
	select {
	case <-sub.Done():
	default:
		t.Errorf("%s: Done is open after Close", what)
	}
}

// Close while a Set is in flight, many times: Close returns, the Set ends,
// nothing races and the connection does not go back to the pool usable
// mid-subscription.
func TestAttack30_closeConcurrentWithSet(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp := attack30RedisPool(s.Addr())
	defer rp.Close()
	p := newPooled(s.Addr(), attack30Pool{rp}, nil, time.Second, clock.Real())
	for i := 0; i < 200; i++ {
		sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 5; j++ {
				chans := make([]string, 0, 50)
				for k := 0; k < 50; k++ {
					chans = append(chans, fmt.Sprintf("a30:%d:%d:%d", i, j, k))
				}
				if err := sub.Set(context.Background(), chans); err != nil {
					return
				}
			}
		}()
		if i%3 != 0 {
			time.Sleep(time.Duration(i%7) * 100 * time.Microsecond)
		}
		attack30Close(t, fmt.Sprintf("iteration %d", i), sub)
		wg.Wait()
		if err := sub.Set(context.Background(), []string{"x"}); err != ErrClosed {
			t.Fatalf("iteration %d: Set after Close: %v, want ErrClosed", i, err)
		}
	}
	attack30Clean(t, "after the closes", rp.Stats)
	// The pool's connections are not left subscribed: a command on each
	// idle one gets its own reply.
	for i := 0; i < 8; i++ {
		c := rp.Get()
		if v, err := redis.String(c.Do("ECHO", "a30")); err != nil || v != "a30" {
			t.Errorf("a pooled connection answers ECHO with %q, %v", v, err)
		}
		defer c.Close()
	}
}

// Set with a ctx already ended, or that ends while it writes: Set fails or
// succeeds, the subscription is then either live or broken (never a
// connection read by two), and Close returns with the pool clean.
func TestAttack30_setWithEndingCtx(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp := attack30RedisPool(s.Addr())
	defer rp.Close()
	p := newPooled(s.Addr(), attack30Pool{rp}, nil, time.Second, clock.Real())

	sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sub.Set(ctx, []string{"a30:c"}); err != context.Canceled {
		t.Errorf("Set with an ended ctx: %v", err)
	}
	select {
	case <-sub.Done():
		t.Error("a Set refused for its ended ctx broke the subscription")
	default:
	}
	if err := sub.Set(ctx5s(t), []string{"a30:c"}); err != nil {
		t.Fatal(err)
	}
	if !redistest.WaitFor(ctx5s(t), func() bool { return sub.Live("a30:c") }) {
		t.Fatal("not live")
	}
	attack30Close(t, "after an ended ctx", sub)

	broke := 0
	for i := 0; i < 300; i++ {
		sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%20)*20*time.Microsecond)
		chans := make([]string, 200)
		for k := range chans {
			chans[k] = fmt.Sprintf("a30:soon:%d:%d", i, k)
		}
		err = sub.Set(ctx, chans)
		cancel()
		if err != nil {
			broke++
		}
		attack30Close(t, fmt.Sprintf("iteration %d", i), sub)
	}
	t.Logf("%d of 300 Sets failed with their ctx", broke)
	attack30Clean(t, "after the Sets", rp.Stats)
}

// Close at once after Subscribe, before any Set (the reader may not have
// begun to read yet).
func TestAttack30_closeRightAfterSubscribe(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp := attack30RedisPool(s.Addr())
	defer rp.Close()
	p := newPooled(s.Addr(), attack30Pool{rp}, nil, time.Second, clock.Real())
	for i := 0; i < 300; i++ {
		sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
		if err != nil {
			t.Fatal(err)
		}
		attack30Close(t, fmt.Sprintf("iteration %d", i), sub)
		sub.Close() // twice
	}
	attack30Clean(t, "after the closes", rp.Stats)
	if st := rp.Stats(); st.ActiveCount != 0 {
		t.Errorf("broken subscription connections went back to the pool: %+v", st)
	}
}

// The master killed under a live subscription: the reader ends, Done
// closes, Close gives the slot back (discarded), and once the master is
// back a new subscription hears releases.
func TestAttack30_masterKilledUnderSubscription(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp := attack30RedisPool(s.Addr())
	defer rp.Close()
	p := newPooled(s.Addr(), attack30Pool{rp}, nil, time.Second, clock.Real())
	sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Set(ctx5s(t), []string{"a30:k"}); err != nil {
		t.Fatal(err)
	}
	if !redistest.WaitFor(ctx5s(t), func() bool { return sub.Live("a30:k") }) {
		t.Fatal("not live")
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done stays open after the master died")
	}
	if sub.Live("a30:k") {
		t.Error("live on a dead connection")
	}
	if err := sub.Set(ctx5s(t), []string{"a30:k", "a30:k2"}); err != ErrClosed {
		t.Errorf("Set on a broken subscription: %v, want ErrClosed", err)
	}
	attack30Close(t, "after the kill", sub)
	if st := rp.Stats(); st.ActiveCount != 0 || st.IdleCount != 0 {
		t.Errorf("after Close the pool holds %+v, want the dead connection discarded", st)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	heard := make(chan string, 1)
	sub, err = p.Subscribe(ctx5s(t), func(ch, _ string) {
		select {
		case heard <- ch:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Set(ctx5s(t), []string{"a30:k"}); err != nil {
		t.Fatal(err)
	}
	if !redistest.WaitFor(ctx5s(t), func() bool { return sub.Live("a30:k") }) {
		t.Fatal("the new subscription never went live")
	}
	if _, err := s.Do("PUBLISH", "a30:k", "x"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-heard:
	case <-time.After(5 * time.Second):
		t.Fatal("the new subscription hears nothing")
	}
	attack30Close(t, "the new subscription", sub)
	attack30Clean(t, "at the end", rp.Stats)
}

// The user's pool has a read timeout: the subscription, which reads without
// a deadline, must not break while idle for longer than it.
func TestAttack30_userReadTimeoutDoesNotBreakAnIdleSubscription(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp := attack30RedisPool(s.Addr(), redis.DialReadTimeout(100*time.Millisecond))
	defer rp.Close()
	p := newPooled(s.Addr(), attack30Pool{rp}, nil, time.Second, clock.Real())
	heard := make(chan string, 1)
	sub, err := p.Subscribe(ctx5s(t), func(ch, _ string) {
		select {
		case heard <- ch:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Set(ctx5s(t), []string{"a30:rt"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	select {
	case <-sub.Done():
		t.Fatal("an idle subscription broke on the pool's read timeout")
	default:
	}
	if !sub.Live("a30:rt") {
		t.Fatal("not live after an idle spell")
	}
	if _, err := s.Do("PUBLISH", "a30:rt", "x"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-heard:
	case <-time.After(5 * time.Second):
		t.Fatal("nothing heard after an idle spell")
	}
	// Close behind a stopped master, with the read timeout set.
	paused(t, s)
	attack30Close(t, "behind a stopped master", sub)
	_ = s.Resume()
	attack30Clean(t, "at the end", rp.Stats)
}

// logPool wraps every connection it lends in redis.NewLoggingConn, as a
// user debugging their pool might. The wrapper has both
// ConnWithContext and ConnWithTimeout, and passes them through.
type logPool struct {
	p   *redis.Pool
	mu  *sync.Mutex
	buf *bytes.Buffer
}

type syncWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w syncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

func (l logPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := l.p.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return redis.NewLoggingConn(c, log.New(syncWriter{l.mu, l.buf}, "", 0), "a30"), nil
}

func TestAttack30_loggingConnPoolWorksAndBreaks(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp := attack30RedisPool(s.Addr())
	defer rp.Close()
	lp := logPool{p: rp, mu: new(sync.Mutex), buf: new(bytes.Buffer)}
	p := newPooled(s.Addr(), lp, nil, time.Second, clock.Real())
	for i := 0; i < 20; i++ {
		heard := make(chan string, 1)
		sub, err := p.Subscribe(ctx5s(t), func(ch, _ string) {
			select {
			case heard <- ch:
			default:
			}
		})
		if err != nil {
			t.Fatalf("a logging connection is refused: %v", err)
		}
		if err := sub.Set(ctx5s(t), []string{"a30:log"}); err != nil {
			t.Fatal(err)
		}
		if !redistest.WaitFor(ctx5s(t), func() bool { return sub.Live("a30:log") }) {
			t.Fatal("not live")
		}
		if _, err := s.Do("PUBLISH", "a30:log", "x"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-heard:
		case <-time.After(5 * time.Second):
			t.Fatal("nothing heard")
		}
		if i%2 == 0 {
			paused(t, s)
		}
		attack30Close(t, fmt.Sprintf("iteration %d", i), sub)
		_ = s.Resume()
	}
	attack30Clean(t, "at the end", rp.Stats)
	if st := rp.Stats(); st.ActiveCount != 0 {
		t.Errorf("broken subscription connections went back to the pool: %+v", st)
	}
}

// timeoutOnlyConn is a connection of the user's Dial that can read with a
// timeout (redis.ConnWithTimeout) but not with a context: a wrapper written
// for redigo before ReceiveContext existed. The pool lends it inside its
// own activeConn, which has every method: the type check passes, but
// activeConn.ReceiveContext then fails (errContextNotSupported) without
// breaking anything.
type timeoutOnlyConn struct{ c redis.Conn }

func (w timeoutOnlyConn) Close() error                            { return w.c.Close() }
func (w timeoutOnlyConn) Err() error                              { return w.c.Err() }
func (w timeoutOnlyConn) Do(cmd string, args ...any) (any, error) { return w.c.Do(cmd, args...) }
func (w timeoutOnlyConn) Send(cmd string, args ...any) error      { return w.c.Send(cmd, args...) }
func (w timeoutOnlyConn) Flush() error                            { return w.c.Flush() }
func (w timeoutOnlyConn) Receive() (any, error)                   { return w.c.Receive() }
func (w timeoutOnlyConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(w.c, d)
}
func (w timeoutOnlyConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	return redis.DoWithTimeout(w.c, d, cmd, args...)
}

// bareDialConn has only redis.Conn's methods.
type bareDialConn struct{ redis.Conn }

// A redis.Pool whose Dial wraps its connections, lent through a user's
// pool: the subscription must be refused (ErrInvalid, as for a pool whose
// own connections lack the abilities) or, if accepted, Close must return.
func TestAttack30_DEFECT_closeHangsOnUnbreakableInnerConn(t *testing.T) {
	redistest.SkipShort(t)
	for _, tc := range []struct {
		name string
		wrap func(redis.Conn) redis.Conn
	}{
		{"timeout only", func(c redis.Conn) redis.Conn { return timeoutOnlyConn{c} }},
		{"bare", func(c redis.Conn) redis.Conn { return bareDialConn{c} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.StartOne(t)
			rp := &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
				c, err := redis.DialContext(ctx, "tcp", s.Addr())
				if err != nil {
					return nil, err
				}
				return tc.wrap(c), nil
			}}
			defer rp.Close()
			p := newPooled(s.Addr(), attack30Pool{rp}, nil, time.Second, clock.Real())
			sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
			if err != nil {
				t.Logf("refused: %v", err)
				attack30Clean(t, "after the refusal", rp.Stats)
				return
			}
			t.Logf("accepted: the check saw %T", sub.(*redigoSub).conn)
			setErr := sub.Set(ctx5s(t), []string{"a30:w"})
			live := redistest.WaitFor(ctx5s(t), func() bool { return sub.Live("a30:w") })
			select {
			case <-sub.Done():
				t.Logf("Set: %v; the subscription broke at once (its reader cannot read): a silent, permanently dead subscription, not ErrInvalid", setErr)
			default:
				t.Logf("Set: %v; live: %v", setErr, live)
			}
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				sub.Close()
			}()
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				// Free the reader so that the test ends: kill the master.
				_ = s.Kill()
				<-closed
				t.Fatal("DEFECT: Close hangs: breakConn's ReceiveContext fails with errContextNotSupported on the pool's inner connection and breaks nothing, so the reader (ReceiveWithTimeout(0), no deadline) never ends")
			}
			attack30Clean(t, "after Close", rp.Stats)
		})
	}
}

var _ pool.Pool = attack30Pool{}
var _ = strings.Contains

// guardedOnly hides that a *pool.RedisPool can dial: its guarded
// connections are borrowed.
type guardedOnly struct{ p *pool.RedisPool }

func (g guardedOnly) GetContext(ctx context.Context) (redis.Conn, error) { return g.p.GetContext(ctx) }

// The package's own guarded connections, borrowed, with a short read
// timeout: an idle subscription outlives it, and Close behind a stopped
// master returns and discards the connection.
func TestAttack30_guardedPoolReadTimeoutIdleSubscription(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	pl := s.Pool(pool.WithReadTimeout(100 * time.Millisecond))
	p := newPooled(s.Addr(), guardedOnly{pl}, nil, time.Second, clock.Real())
	for i := 0; i < 3; i++ {
		heard := make(chan string, 1)
		sub, err := p.Subscribe(ctx5s(t), func(ch, _ string) {
			select {
			case heard <- ch:
			default:
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Set(ctx5s(t), []string{"a30:g"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		select {
		case <-sub.Done():
			t.Fatal("an idle guarded subscription broke on the pool's read timeout")
		default:
		}
		if _, err := s.Do("PUBLISH", "a30:g", "x"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-heard:
		case <-time.After(5 * time.Second):
			t.Fatal("nothing heard after an idle spell")
		}
		if i == 1 {
			paused(t, s)
		}
		attack30Close(t, fmt.Sprintf("iteration %d", i), sub)
		_ = s.Resume()
	}
	if st := pl.Stats(); st.ActiveCount != st.IdleCount {
		t.Errorf("the pool still lends: %+v", st)
	}
}

// wrapPool lends its redis.Pool's connections wrapped by wrap.
type wrapPool struct {
	p    *redis.Pool
	wrap func(redis.Conn) redis.Conn
}

func (w wrapPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := w.p.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return w.wrap(c), nil
}

// The type check sees only the outermost connection: redis.NewLoggingConn
// has every method and delegates, so a pool of the user's own that logs a
// connection able to read with a timeout but not with a context passes
// the check, and Close then hangs as in
// TestAttack30_DEFECT_closeHangsOnUnbreakableInnerConn.
func TestAttack30_DEFECT_loggingWrapperHidesUnbreakableConn(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp := attack30RedisPool(s.Addr())
	defer rp.Close()
	var mu sync.Mutex
	var buf bytes.Buffer
	wp := wrapPool{rp, func(c redis.Conn) redis.Conn {
		return redis.NewLoggingConn(timeoutOnlyConn{c}, log.New(syncWriter{&mu, &buf}, "", 0), "a30")
	}}
	p := newPooled(s.Addr(), wp, nil, time.Second, clock.Real())
	sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
	if err != nil {
		t.Logf("refused: %v", err)
		return
	}
	if err := sub.Set(ctx5s(t), []string{"a30:lw"}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { defer close(closed); sub.Close() }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		_ = s.Kill()
		<-closed
		t.Fatal("DEFECT: accepted (the check saw a loggingConn), and Close hangs: breakConn broke nothing")
	}
}
