package redlock_test

import (
	"context"
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

// closeRace orders, once armed, what a busy client may see in either
// order when a master closes a pipelined connection: the reader's read
// meets EOF, and redigo closes the socket as it fails that read; the
// writer's next flush then meets "use of closed network connection"
// (net.ErrClosed). The read's failure reaches the caller only after a
// flush has failed so.
type closeRace struct {
	armed    atomic.Bool
	once     sync.Once
	flushed  chan struct{} // closed once an armed flush failed
	ronce    sync.Once
	readFail chan struct{} // closed once an armed read failed
}

// closeRaceConn is a real redigo connection with the order above.
type closeRaceConn struct {
	redis.Conn
	r *closeRace
}

func (c closeRaceConn) Flush() error {
	err := c.Conn.Flush()
	if err != nil && c.r.armed.Load() {
		c.r.once.Do(func() { close(c.r.flushed) })
	}
	return err
}

func (c closeRaceConn) ReceiveWithTimeout(timeout time.Duration) (any, error) {
	v, err := redis.ReceiveWithTimeout(c.Conn, timeout)
	if _, isReply := err.(redis.Error); err != nil && !isReply && c.r.armed.Load() {
		c.r.ronce.Do(func() { close(c.r.readFail) })
		select {
		case <-c.r.flushed:
		case <-time.After(5 * time.Second): // never hang the test
		}
	}
	return v, err
}

func (c closeRaceConn) Receive() (any, error) { return c.ReceiveWithTimeout(0) }

func (c closeRaceConn) DoWithTimeout(timeout time.Duration, cmd string, args ...any) (any, error) {
	return redis.DoWithTimeout(c.Conn, timeout, cmd, args...)
}

// closeRacePool dials closeRaceConns: it is a pool.Dialer, so the client
// pipelines on one of its connections.
type closeRacePool struct {
	addr string
	r    *closeRace
}

func (p closeRacePool) Dial(ctx context.Context) (redis.Conn, error) {
	c, err := redis.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return closeRaceConn{Conn: c, r: p.r}, nil
}

func (p closeRacePool) GetContext(ctx context.Context) (redis.Conn, error) { return p.Dial(ctx) }

// TestKillResend_flushAfterTheMastersCloseIsStillAReset: a master that
// closes the connection (CLIENT KILL, a restart) ran nothing more that
// came on it, so what the connection carried is re-sent — also when the
// first failure the client notes is the writer's flush meeting the socket
// that redigo closed on the reader's EOF. That is the master's reset seen
// second-hand, not a connection this client closed because the master
// stalled (which is not re-sent: the master may still run what it read).
// Both releases are confirmed and free their keys.
func TestKillResend_flushAfterTheMastersCloseIsStillAReset(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	race := &closeRace{flushed: make(chan struct{}), readFail: make(chan struct{})}
	c, err := redigo.New([]pool.Pool{closeRacePool{addr: s.Addr(), r: race}}, redlock.WithTimeout(realTimeout))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	a, err := c.TryAcquire(ctx, "killresend:a", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.TryAcquire(ctx, "killresend:b", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	race.armed.Store(true)
	if _, err := s.Do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); err != nil {
		t.Fatal(err)
	}
	errA := make(chan error, 1)
	go func() { errA <- a.Release(ctx) }()
	select {
	case <-race.readFail: // a's read met EOF, and redigo closed the socket
	case <-time.After(10 * time.Second):
		t.Fatal("the reader never met the killed connection's end")
	}
	if err := b.Release(ctx); err != nil {
		t.Errorf("release b after the master closed the connection: %v", err)
	}
	if err := <-errA; err != nil {
		t.Errorf("release a after the master closed the connection: %v", err)
	}
	race.armed.Store(false)
	for _, k := range []string{"killresend:a", "killresend:b"} {
		if n, err := redis.Int(s.Do("EXISTS", k)); err != nil || n != 0 {
			t.Errorf("%s: EXISTS = %d, %v: the release did not free it", k, n, err)
		}
	}
}
