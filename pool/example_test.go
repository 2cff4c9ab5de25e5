package pool_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/pool"
)

// A *redis.Pool of one's own, guarded: every connection it dials (and every
// connection the redlock client dials through its DialContext) reads
// through GuardConn, so a hostile master costs a broken connection.
func ExampleGuardConn() {
	addr := "127.0.0.1:6379"
	guarded := func(ctx context.Context, network, address string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return pool.GuardConn(c, pool.Limits{}), nil // the default limits
	}
	p := &redis.Pool{
		MaxIdle: 16,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr,
				redis.DialContextFunc(guarded),
				redis.DialReadTimeout(time.Second),
				redis.DialWriteTimeout(time.Second))
		},
	}
	defer p.Close()
	// redigo.New([]pool.Pool{p, ...}) pipelines over connections dialed
	// by p.DialContext, guarded as the pool's own.
}

// metered is a pool that wraps a RedisPool, say to count what it lends. It
// passes the RedisPool's Dialer on, so that the redlock client still
// pipelines over it.
type metered struct {
	*pool.RedisPool
	borrowed atomic.Int64
}

func (m *metered) GetContext(ctx context.Context) (redis.Conn, error) {
	m.borrowed.Add(1)
	return m.RedisPool.GetContext(ctx)
}

// Dial is promoted from the embedded *pool.RedisPool; a wrapper that holds
// its pool in a named field writes it out:
//
//	func (m *metered) Dial(ctx context.Context) (redis.Conn, error) { return m.p.Dial(ctx) }
var _ pool.Dialer = (*metered)(nil)

// A pool that wraps a RedisPool keeps its abilities by implementing the
// same exported interfaces (here by embedding it).
func ExampleDialer() {
	rp, err := pool.New("127.0.0.1:6379")
	if err != nil {
		panic(err)
	}
	defer rp.Close()
	var p pool.Pool = &metered{RedisPool: rp}
	_, dials := p.(pool.Dialer)
	_, named := p.(pool.Addresser)
	fmt.Println(dials, named) // redlock pipelines over it, and names the master
	// Output: true true
}
