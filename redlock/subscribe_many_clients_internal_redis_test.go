package redlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

// Many Clients over pools of the user's own (borrowed subscriptions), with
// waiters woken by releases, then closed with waiters still waiting: no
// race, no hang, no connection left lent.
func TestSubscribeBorrowed_manyClientsWakeThenClose(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 3)
	var rps []*redis.Pool
	newClient := func() *Client {
		pools := make([]pool.Pool, len(servers))
		for i, s := range servers {
			rp := redistest.UserRedisPool(s.Addr(), nil)
			rps = append(rps, rp)
			pools[i] = redistest.LendingPool{P: rp}
		}
		c, err := newRedigo(pools, WithTimeout(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	defer func() {
		for _, rp := range rps {
			rp.Close()
		}
	}()
	for round := 0; round < 3; round++ {
		const clients = 6
		cs := make([]*Client, clients)
		for i := range cs {
			cs[i] = newClient()
		}
		key := fmt.Sprintf("subs:many:%d", round)
		holder, err := cs[0].Acquire(ctx5s(t), key, WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		got := make(chan *Lock, clients*2)
		ctx, cancel := context.WithCancel(context.Background())
		for i := 1; i < clients; i++ {
			for j := 0; j < 2; j++ {
				wg.Add(1)
				go func(c *Client) {
					defer wg.Done()
					l, err := c.Acquire(ctx, key, WithTTL(time.Minute), WithWait(time.Hour), WithBackoff(time.Minute, time.Minute))
					if err == nil {
						got <- l
					}
				}(cs[i])
			}
		}
		// the waiters subscribe: each waiting client, one subscription a master
		redistest.Eventually(t, 10*time.Second, "every waiting client subscribed on every master", func() bool {
			for _, s := range servers {
				if a27NumSub(t, s, wakeChannel(key)) < clients-1 {
					return false
				}
			}
			return true
		})
		if err := holder.Release(ctx5s(t)); err != nil {
			t.Fatal(err)
		}
		// A release wakes a waiter long before its minute of backoff.
		var l *Lock
		select {
		case l = <-got:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: no waiter was woken by the release", round)
		}
		if err := l.Release(ctx5s(t)); err != nil {
			t.Fatal(err)
		}
		select {
		case l = <-got:
			_ = l.Release(ctx5s(t))
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the second release woke no one", round)
		}
		// Close every client with the rest still waiting.
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			var cw sync.WaitGroup
			for _, c := range cs {
				cw.Add(1)
				go func(c *Client) { defer cw.Done(); c.Close() }(c)
			}
			cw.Wait()
		}()
		select {
		case <-closed:
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: Client.Close hangs", round)
		}
		cancel()
		wg.Wait()
		close(got)
		for range got {
		}
	}
	for i, rp := range rps {
		redistest.LendsNothing(t, fmt.Sprintf("pool %d", i), rp.Stats)
	}
}

// The redistest.TimeoutOnlyConn case at the Client level: a waiter on a pool of the
// user's own whose redis.Pool dials wrapped connections; Client.Close never
// returned before such pools were refused a subscription.
func TestSubscribeBorrowed_clientCloseReturnsOnTimeoutOnlyDialConns(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	rp := redistest.UserRedisPool(s.Addr(), func(c redis.Conn) redis.Conn { return redistest.TimeoutOnlyConn{C: c} })
	defer rp.Close()
	c, err := newRedigo([]pool.Pool{redistest.LendingPool{P: rp}}, WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx5s(t), "subs:hang", WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		_, _ = c.Acquire(ctx, "subs:hang", WithWait(time.Hour))
	}()
	// Refused (ErrInvalid), the waiter polls and never subscribes: that is
	// fine; accepted, Close must still return.
	wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer wcancel()
	subscribed := redistest.WaitFor(wctx, func() bool {
		v, _ := redis.Values(s.Do("PUBSUB", "NUMSUB", wakeChannel("subs:hang")))
		n, _ := redis.Int(v[1], nil)
		return n == 1
	})
	t.Logf("the waiter subscribed: %v", subscribed)
	cancel()
	<-waited
	closed := make(chan struct{})
	go func() { defer close(closed); c.Close() }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		_ = s.Kill() // frees the reader, so that the test ends
		<-closed
		t.Fatal("Client.Close hangs: the borrowed subscription's connection cannot be broken (its pool's inner connection lacks ReceiveContext) and its reader never ends")
	}
}
