package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// The pools and connections of a user's own, as tests of the redigo
// transports and of the Client build them.

// UserRedisPool is a user's redis.Pool of the master at addr, whose Dial
// wraps each connection with wrap, when set.
func UserRedisPool(addr string, wrap func(redis.Conn) redis.Conn, opts ...redis.DialOption) *redis.Pool {
	return &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		c, err := redis.DialContext(ctx, "tcp", addr, opts...)
		if err != nil || wrap == nil {
			return c, err
		}
		return wrap(c), nil
	}}
}

// LendingPool is a pool of the user's own, neither a pool.Dialer nor a
// *redis.Pool, so that a subscription borrows from it; wrap, when set,
// wraps each connection it lends, as a user's pool might (logging, a
// connection type of their own).
type LendingPool struct {
	P interface {
		GetContext(context.Context) (redis.Conn, error)
	}
	Wrap func(redis.Conn) redis.Conn
}

// GetContext lends a connection of P, wrapped by Wrap when set.
func (l LendingPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := l.P.GetContext(ctx)
	if err != nil || l.Wrap == nil {
		return c, err
	}
	return l.Wrap(c), nil
}

// LendsNothing waits for the pool to lend nothing: every connection it
// counts is idle.
func LendsNothing(t *testing.T, what string, stats func() redis.PoolStats) {
	t.Helper()
	if !WaitFor(ctx5s(t), func() bool { st := stats(); return st.ActiveCount == st.IdleCount }) {
		st := stats()
		t.Errorf("%s: the pool still lends %d connections (%d active, %d idle)", what, st.ActiveCount-st.IdleCount, st.ActiveCount, st.IdleCount)
	}
}

// TimeoutOnlyConn is a connection of the user's Dial that can read with a
// timeout (redis.ConnWithTimeout) but not with a context: a wrapper written
// for redigo before ReceiveContext existed. The pool lends it inside its
// own activeConn, which has every method: the type check passes, but
// activeConn.ReceiveContext then fails (errContextNotSupported) without
// breaking anything.
type TimeoutOnlyConn struct{ C redis.Conn }

// Close is C's.
func (w TimeoutOnlyConn) Close() error { return w.C.Close() }

// Err is C's.
func (w TimeoutOnlyConn) Err() error { return w.C.Err() }

// Do is C's.
func (w TimeoutOnlyConn) Do(cmd string, args ...any) (any, error) { return w.C.Do(cmd, args...) }

// Send is C's.
func (w TimeoutOnlyConn) Send(cmd string, args ...any) error { return w.C.Send(cmd, args...) }

// Flush is C's.
func (w TimeoutOnlyConn) Flush() error { return w.C.Flush() }

// Receive is C's.
func (w TimeoutOnlyConn) Receive() (any, error) { return w.C.Receive() }

// ReceiveWithTimeout is C's.
func (w TimeoutOnlyConn) ReceiveWithTimeout(d time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(w.C, d)
}

// DoWithTimeout is C's.
func (w TimeoutOnlyConn) DoWithTimeout(d time.Duration, cmd string, args ...any) (any, error) {
	return redis.DoWithTimeout(w.C, d, cmd, args...)
}

// ctx5s ends 5 s from now, or with t.
func ctx5s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}
