package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

// The pattern of cluster.go's slotsFrom and cmd/redlock's do: borrow a
// connection, redis.DoContext on it, give it back (defer Close). A ctx
// that ends while the reply is in flight leaves redigo's goroutine
// reading; the connection must not go back to the pool usable, and
// nothing may race with that goroutine. Cancellations are timed to land
// anywhere around the round trip.
func TestPooled_doContextConnectionNotReturnedUsable(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	for _, tc := range []struct {
		name string
		pool func() (pool.Pool, func() redis.PoolStats)
	}{
		{"redis.Pool", func() (pool.Pool, func() redis.PoolStats) {
			rp := redistest.UserRedisPool(s.Addr(), nil)
			t.Cleanup(func() { rp.Close() })
			return rp, rp.Stats
		}},
		{"pool.RedisPool", func() (pool.Pool, func() redis.PoolStats) {
			rp := s.Pool()
			return rp, rp.Stats
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, stats := tc.pool()
			big := make([]byte, 256<<10)
			if _, err := s.Do("SET", "docontext:big", big); err != nil {
				t.Fatal(err)
			}
			cancelled := 0
			for i := 0; i < 400; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%40)*25*time.Microsecond)
				c, err := p.GetContext(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				var v any
				if i%2 == 0 {
					v, err = redis.DoContext(c, ctx, "GET", "docontext:big")
				} else {
					v, err = redis.DoContext(c, ctx, "ECHO", fmt.Sprint(i))
				}
				if err != nil {
					cancelled++
				} else if i%2 == 1 {
					if got, _ := redis.String(v, nil); got != fmt.Sprint(i) {
						t.Fatalf("iteration %d: ECHO answered %q: a connection out of step came from the pool", i, got)
					}
				}
				c.Close()
				cancel()
			}
			t.Logf("%d of 400 cancelled", cancelled)
			redistest.LendsNothing(t, "after the commands", stats)
		})
	}
}
