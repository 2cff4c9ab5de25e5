package redigot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/transport"
)

// Close while a Set is in flight, many times: Close returns, the Set ends,
// nothing races and the connection does not go back to the pool usable
// mid-subscription.
func TestSubscribeBorrowed_closeConcurrentWithSet(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp, p := borrowingFrom(t, s.Addr())
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
					chans = append(chans, fmt.Sprintf("sub:%d:%d:%d", i, j, k))
				}
				if err := sub.Set(context.Background(), chans); err != nil {
					return
				}
			}
		}()
		if i%3 != 0 {
			time.Sleep(time.Duration(i%7) * 100 * time.Microsecond) // the subject: Close lands at a different moment each time
		}
		closeWithin(t, fmt.Sprintf("iteration %d", i), sub)
		wg.Wait()
		if err := sub.Set(context.Background(), []string{"x"}); err != transport.ErrClosed {
			t.Fatalf("iteration %d: Set after Close: %v, want transport.ErrClosed", i, err)
		}
	}
	redistest.LendsNothing(t, "after the closes", rp.Stats)
	// The pool's connections are not left subscribed: a command on each
	// idle one gets its own reply.
	for i := 0; i < 8; i++ {
		c := rp.Get()
		if v, err := redis.String(c.Do("ECHO", "borrowed")); err != nil || v != "borrowed" {
			t.Errorf("a pooled connection answers ECHO with %q, %v", v, err)
		}
		defer c.Close()
	}
}

// Set with a ctx already ended, or that ends while it writes: Set fails or
// succeeds, the subscription is then either live or broken (never a
// connection read by two), and Close returns with the pool clean.
func TestSubscribeBorrowed_setWithEndingCtx(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp, p := borrowingFrom(t, s.Addr())

	sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sub.Set(ctx, []string{"sub:c"}); err != context.Canceled {
		t.Errorf("Set with an ended ctx: %v", err)
	}
	select {
	case <-sub.Done():
		t.Error("a Set refused for its ended ctx broke the subscription")
	default:
	}
	if err := sub.Set(ctx5s(t), []string{"sub:c"}); err != nil {
		t.Fatal(err)
	}
	if !redistest.WaitFor(ctx5s(t), func() bool { return sub.Live("sub:c") }) {
		t.Fatal("not live")
	}
	closeWithin(t, "after an ended ctx", sub)

	broke := 0
	for i := 0; i < 300; i++ {
		sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%20)*20*time.Microsecond)
		chans := make([]string, 200)
		for k := range chans {
			chans[k] = fmt.Sprintf("sub:soon:%d:%d", i, k)
		}
		err = sub.Set(ctx, chans)
		cancel()
		if err != nil {
			broke++
		}
		closeWithin(t, fmt.Sprintf("iteration %d", i), sub)
	}
	t.Logf("%d of 300 Sets failed with their ctx", broke)
	redistest.LendsNothing(t, "after the Sets", rp.Stats)
}

// Close at once after Subscribe, before any Set (the reader may not have
// begun to read yet).
func TestSubscribeBorrowed_closeRightAfterSubscribe(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp, p := borrowingFrom(t, s.Addr())
	for i := 0; i < 300; i++ {
		sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
		if err != nil {
			t.Fatal(err)
		}
		closeWithin(t, fmt.Sprintf("iteration %d", i), sub)
		sub.Close() // twice
	}
	redistest.LendsNothing(t, "after the closes", rp.Stats)
	if st := rp.Stats(); st.ActiveCount != 0 {
		t.Errorf("broken subscription connections went back to the pool: %+v", st)
	}
}

// The master killed under a live subscription: the reader ends, Done
// closes, Close gives the slot back (discarded), and once the master is
// back a new subscription hears releases.
func TestSubscribeBorrowed_masterKilledUnderSubscription(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp, p := borrowingFrom(t, s.Addr())
	sub, _ := heardSub(t, p, "sub:k")
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done stays open after the master died")
	}
	if sub.Live("sub:k") {
		t.Error("live on a dead connection")
	}
	if err := sub.Set(ctx5s(t), []string{"sub:k", "sub:k2"}); err != transport.ErrClosed {
		t.Errorf("Set on a broken subscription: %v, want transport.ErrClosed", err)
	}
	closeWithin(t, "after the kill", sub)
	if st := rp.Stats(); st.ActiveCount != 0 || st.IdleCount != 0 {
		t.Errorf("after Close the pool holds %+v, want the dead connection discarded", st)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	sub, heard := heardSub(t, p, "sub:k")
	hears(t, s, heard, "sub:k")
	closeWithin(t, "the new subscription", sub)
	redistest.LendsNothing(t, "at the end", rp.Stats)
}

// The pool's connections have a short read timeout (a user's redis.Pool,
// the package's own guarded pool): the subscription, which reads without a
// deadline, does not break while idle for longer than it, and its Close behind a stopped master returns and
// discards the connection.
func TestSubscribeBorrowed_readTimeoutDoesNotBreakAnIdleSubscription(t *testing.T) {
	redistest.SkipShort(t)
	for _, tc := range []struct {
		name string
		pool func(*redistest.Server) (pool.Pool, func() redis.PoolStats)
	}{
		{"user's redis.Pool", func(s *redistest.Server) (pool.Pool, func() redis.PoolStats) {
			rp := redistest.UserRedisPool(s.Addr(), nil, redis.DialReadTimeout(100*time.Millisecond))
			t.Cleanup(func() { rp.Close() })
			return redistest.LendingPool{P: rp}, rp.Stats
		}},
		{"guarded pool", func(s *redistest.Server) (pool.Pool, func() redis.PoolStats) {
			pl := s.Pool(pool.WithReadTimeout(100 * time.Millisecond))
			return redistest.LendingPool{P: pl}, pl.Stats
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.StartOne(t)
			lender, stats := tc.pool(s)
			p := newPooled(s.Addr(), lender, nil, time.Second, stall.New(clock.Real()))
			for i := range 3 {
				sub, heard := heardSub(t, p, "sub:rt")
				time.Sleep(500 * time.Millisecond) // the subject: an idle spell of five read timeouts, in which the subscription must not break
				select {
				case <-sub.Done():
					t.Fatal("an idle subscription broke on the pool's read timeout")
				default:
				}
				if !sub.Live("sub:rt") {
					t.Fatal("not live after an idle spell")
				}
				hears(t, s, heard, "sub:rt")
				if i == 1 {
					paused(t, s)
				}
				closeWithin(t, fmt.Sprintf("iteration %d", i), sub)
				_ = s.Resume()
			}
			redistest.LendsNothing(t, "at the end", stats)
		})
	}
}

// logged wraps each connection in redis.NewLoggingConn, as a user debugging
// their pool might, over inner's wrapping (if any): the logging connection
// has every method and passes each call on.
func logged(inner func(redis.Conn) redis.Conn) func(redis.Conn) redis.Conn {
	logger := log.New(io.Discard, "", 0)
	return func(c redis.Conn) redis.Conn {
		if inner != nil {
			c = inner(c)
		}
		return redis.NewLoggingConn(c, logger, "borrowed")
	}
}

func TestSubscribeBorrowed_loggingConnPoolWorksAndBreaks(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp := redistest.UserRedisPool(s.Addr(), nil)
	defer rp.Close()
	lp := redistest.LendingPool{P: rp, Wrap: logged(nil)}
	p := newPooled(s.Addr(), lp, nil, time.Second, stall.New(clock.Real()))
	for i := 0; i < 20; i++ {
		sub, heard := heardSub(t, p, "sub:log")
		hears(t, s, heard, "sub:log")
		if i%2 == 0 {
			paused(t, s)
		}
		closeWithin(t, fmt.Sprintf("iteration %d", i), sub)
		_ = s.Resume()
	}
	redistest.LendsNothing(t, "at the end", rp.Stats)
	if st := rp.Stats(); st.ActiveCount != 0 {
		t.Errorf("broken subscription connections went back to the pool: %+v", st)
	}
}

// A redis.Pool whose Dial wraps its connections, lent through a user's
// pool: the pool's activeConn has every method and passes each call on, so
// a check of the methods accepted it, and Close then hung for ever (the
// reader, with no deadline, on a connection breakConn could not break). The subscription is refused
// (ErrInvalid, as for a pool whose own connections lack the abilities);
// were it accepted, Close must still return.
func TestSubscribeBorrowed_unbreakableInnerConnIsRefused(t *testing.T) {
	redistest.SkipShort(t)
	for _, tc := range []struct {
		name string
		wrap func(redis.Conn) redis.Conn
	}{
		{"timeout only", func(c redis.Conn) redis.Conn { return redistest.TimeoutOnlyConn{C: c} }},
		{"bare", func(c redis.Conn) redis.Conn { return bareConn{c} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.StartOne(t)
			rp := redistest.UserRedisPool(s.Addr(), tc.wrap)
			defer rp.Close()
			p := newPooled(s.Addr(), redistest.LendingPool{P: rp}, nil, time.Second, stall.New(clock.Real()))
			refused(t, s, p, rp.Stats)
		})
	}
}

// A type check sees only the outermost connection: redis.NewLoggingConn
// has every method and delegates, so a pool of the user's own that logs a
// connection able to read with a timeout but not with a context passed
// it, and Close then hung as in TestSubscribeBorrowed_unbreakableInnerConnIsRefused.
// Now refused.
func TestSubscribeBorrowed_loggingWrapperOverUnbreakableConnIsRefused(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp := redistest.UserRedisPool(s.Addr(), nil)
	defer rp.Close()
	wp := redistest.LendingPool{P: rp, Wrap: logged(func(c redis.Conn) redis.Conn { return redistest.TimeoutOnlyConn{C: c} })}
	p := newPooled(s.Addr(), wp, nil, time.Second, stall.New(clock.Real()))
	refused(t, s, p, rp.Stats)
}

// refused checks that p refuses a subscription (ErrInvalid) and that the
// pool lends nothing after it. Were one accepted, its Close could hang for
// ever on a connection that does not break: the master is killed first, so
// that the test ends.
func refused(t *testing.T, s *redistest.Server, p *pooledTransport, stats func() redis.PoolStats) {
	t.Helper()
	sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
	if err == nil {
		_ = s.Kill()
		sub.Close()
		t.Fatalf("accepted a subscription on connections that do not break (%T)", sub.(*redigoSub).conn)
	}
	if !errors.Is(err, fault.ErrInvalid) {
		t.Errorf("refused with %v, want fault.ErrInvalid", err)
	}
	redistest.LendsNothing(t, "after the refusal", stats)
}

// borrowingFrom is a user's redis.Pool of the master at addr, lent through
// a redistest.LendingPool, and a pooled transport on it whose subscriptions borrow.
func borrowingFrom(t *testing.T, addr string, opts ...redis.DialOption) (*redis.Pool, *pooledTransport) {
	rp := redistest.UserRedisPool(addr, nil, opts...)
	t.Cleanup(func() { rp.Close() })
	return rp, newPooled(addr, redistest.LendingPool{P: rp}, nil, time.Second, stall.New(clock.Real()))
}
