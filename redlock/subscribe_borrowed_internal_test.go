package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
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
	p := newPooled(s.Addr(), pl, nil, time.Second, clock.Real())
	heard := make(chan string, 1)
	sub, err := p.Subscribe(ctx5s(t), func(channel, _ string) {
		select {
		case heard <- channel:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Set(ctx5s(t), []string{"borrowed:ch"}); err != nil {
		t.Fatal(err)
	}
	rs := sub.(*redigoSub)
	if !redistest.WaitFor(ctx5s(t), func() bool { return rs.Live("borrowed:ch") }) {
		t.Fatal("the subscription never went live")
	}
	if _, err := s.Do("PUBLISH", "borrowed:ch", "x"); err != nil {
		t.Fatal(err)
	}
	select {
	case ch := <-heard:
		if ch != "borrowed:ch" {
			t.Fatalf("heard %q", ch)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the published notice was not heard")
	}
	if got := pl.Stats().ActiveCount; got != 1 {
		t.Fatalf("the pool lends %d connections, want the subscription's one", got)
	}

	paused(t, s)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		sub.Close()
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs behind a stopped master")
	}
	select {
	case <-sub.Done():
	default:
		t.Error("Done is open after Close")
	}
	if st := pl.Stats(); st.ActiveCount != 0 || st.IdleCount != 0 {
		t.Errorf("after Close the pool has %d active, %d idle connections: the broken subscription connection should be discarded", st.ActiveCount, st.IdleCount)
	}
}

// bareConn hides every ability of a redigo connection but redis.Conn's own
// methods, as a pool of the user's own might wrap its connections.
type bareConn struct{ redis.Conn }

// barePool lends bareConns.
type barePool struct {
	p interface {
		GetContext(context.Context) (redis.Conn, error)
	}
}

func (b barePool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := b.p.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return bareConn{c}, nil
}

// A pool whose connections can neither read without a deadline nor be
// broken under their reader cannot carry a subscription: Subscribe says
// so (ErrInvalid, naming the connection type) and gives the connection
// back, rather than a subscription whose reader could never be stopped.
func TestSubscribe_borrowedConnectionThatCannotBeBrokenIsRefused(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	pl := s.Pool()
	p := newPooled(s.Addr(), barePool{pl}, nil, time.Second, clock.Real())
	sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
	if err == nil {
		sub.Close()
		t.Fatal("a subscription on connections that cannot be broken")
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("err = %v, want ErrInvalid", err)
	}
	t.Log(err)
	if st := pl.Stats(); st.ActiveCount != st.IdleCount {
		t.Errorf("the pool still lends %d connections after the refusal", st.ActiveCount-st.IdleCount)
	}
}
