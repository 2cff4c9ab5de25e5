package redigot

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/transport"
)

// A subscription on a connection borrowed from the pool (the pool cannot
// dial one of its own) hears releases, and its Close behind a stopped
// master returns at once and gives the connection back broken, so the
// pool discards it rather than lending it out mid-subscription. Its reader
// used redigo's ReceiveContext, which, cancelled, returns while the read
// it started goes on: the pool's Close then read the same connection
// (a data race under -race, found by TestDowner_outsideTransportGetsTheDownCheck
// with no dialer).
func TestSubscribe_borrowedConnectionCloseBehindAStoppedMaster(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	pl := s.Pool()
	p := newPooled(s.Addr(), pl, nil, time.Second, stall.New(clock.Real()))
	sub, heard := heardSub(t, p, "borrowed:ch")
	hears(t, s, heard, "borrowed:ch")
	if got := pl.Stats().ActiveCount; got != 1 {
		t.Fatalf("the pool lends %d connections, want the subscription's one", got)
	}
	paused(t, s)
	closeWithin(t, "behind a stopped master", sub)
	if st := pl.Stats(); st.ActiveCount != 0 || st.IdleCount != 0 {
		t.Errorf("after Close the pool has %d active, %d idle connections: the broken subscription connection should be discarded", st.ActiveCount, st.IdleCount)
	}
}

// heardSub subscribes on p to channel and waits until the master
// acknowledged it; heard gets the channel of each notice (the latest one
// when nobody takes them).
func heardSub(t *testing.T, p *pooledTransport, channel string) (sub transport.Subscription, heard <-chan string) {
	t.Helper()
	ch := make(chan string, 1)
	sub, err := p.Subscribe(ctx5s(t), func(channel, _ string) {
		select {
		case ch <- channel:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Set(ctx5s(t), []string{channel}); err != nil {
		sub.Close()
		t.Fatal(err)
	}
	if !redistest.WaitFor(ctx5s(t), func() bool { return sub.Live(channel) }) {
		sub.Close()
		t.Fatalf("the subscription to %s never went live", channel)
	}
	return sub, ch
}

// hears publishes on channel at s and waits for the notice on heard.
func hears(t *testing.T, s *redistest.Server, heard <-chan string, channel string) {
	t.Helper()
	if _, err := s.Do("PUBLISH", channel, "x"); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-heard:
		if got != channel {
			t.Fatalf("heard %q, want %q", got, channel)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the notice on %s was not heard", channel)
	}
}

// closeWithin closes sub and fails the test if Close takes 5 s, or leaves
// Done open.
func closeWithin(t *testing.T, what string, sub transport.Subscription) {
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

// bareConn hides every ability of a redigo connection but redis.Conn's own
// methods, as a pool of the user's own might wrap its connections.
type bareConn struct{ redis.Conn }

// A pool whose connections can neither read without a deadline nor be
// broken under their reader cannot carry a subscription: Subscribe says
// so (ErrInvalid, naming the connection type) and gives the connection
// back, rather than a subscription whose reader could never be stopped.
func TestSubscribe_borrowedConnectionThatCannotBeBrokenIsRefused(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	pl := s.Pool()
	p := newPooled(s.Addr(), redistest.LendingPool{P: pl, Wrap: func(c redis.Conn) redis.Conn { return bareConn{c} }}, nil, time.Second, stall.New(clock.Real()))
	sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
	if err == nil {
		sub.Close()
		t.Fatal("a subscription on connections that cannot be broken")
	}
	if !errors.Is(err, fault.ErrInvalid) {
		t.Errorf("err = %v, want fault.ErrInvalid", err)
	}
	t.Log(err)
	redistest.LendsNothing(t, "after the refusal", pl.Stats)
}

// getPool lends as redis.Pool.Get does: a failed dial is lent as a
// connection whose Err is set, with no error from GetContext.
type getPool struct{ p *redis.Pool }

func (g getPool) GetContext(context.Context) (redis.Conn, error) { return g.p.Get(), nil }

// The probe of a pool that lends a failed connection (its dial failed:
// the master is down) proves nothing about breaking: Subscribe fails with
// the dial's error, not a subscription on whatever the pool lends next. Had
// the failed connection passed as broken, a subscription on a connection
// that cannot be broken (redistest.TimeoutOnlyConn) would be accepted once the master
// is back, and its Close would hang.
func TestSubscribe_probeOfAFailedConnectionProvesNothing(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp := redistest.UserRedisPool(s.Addr(), func(c redis.Conn) redis.Conn { return redistest.TimeoutOnlyConn{C: c} })
	t.Cleanup(func() { rp.Close() })
	p := newPooled(s.Addr(), getPool{rp}, nil, time.Second, stall.New(clock.Real()))
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
	if err == nil {
		sub.Close()
		t.Fatal("subscribed while the master is down")
	}
	if errors.Is(err, fault.ErrInvalid) {
		t.Errorf("a failed dial reported as a pool that cannot subscribe: %v", err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	refused(t, s, p, rp.Stats)
}
