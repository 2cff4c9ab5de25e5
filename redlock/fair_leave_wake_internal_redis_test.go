package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Fair waiters X (client D) then B (client C) wait behind a plain holder
// whose key then expires: nothing announces that, and neither client's
// clock runs, so both sleep on. X gives up while it heads the queue and
// the key is free: its leave must announce itself, or B, now first, sleeps
// until its backoff (a minute here) although nothing holds the key.
func TestFair_headLeavingAFreeKeyWakesTheNext(t *testing.T) {
	redistest.SkipShort(t)
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			servers := redistest.Start(t, n)
			h := leadClient(t, servers, true)
			fd := clock.NewFake(time.Unix(1_700_000_000, 0))
			fc := clock.NewFake(time.Unix(1_700_000_001, 0)) // B arrives after X
			d := leadClient(t, servers, true, WithClock(fd))
			c := leadClient(t, servers, true, WithClock(fc))
			inD, inC := settledCount(d), settledCount(c)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			const key = "fair:leave"
			held, err := h.TryAcquire(ctx, key, WithTTL(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			xctx, giveUp := context.WithCancel(ctx)
			defer giveUp()
			x := fairWaiter(xctx, d, key)
			waitCount(t, "X waits", inD, 1)
			b := fairWaiter(ctx, c, key)
			waitCount(t, "B waits", inC, 1)

			// The holder's key runs out on every master, unannounced.
			if !redistest.WaitFor(ctx5s(t), absentEverywhere(servers, key)) {
				t.Fatal("the holder's key did not expire")
			}
			_ = held // never released: it expired

			giveUp()
			if lx := <-x; lx != nil {
				t.Fatal("X got the lock after giving up")
			}
			getsIt(ctx, t, "B, first once X left on a free key,", b)
		})
	}
}

// A fair holder releases after its key expired (unannounced: nobody was
// told), with waiter X behind it on a fake clock whose backoff never
// fires. The release deletes nothing, but it takes the holder's entry out
// of the queue and so makes X first on a free key: it must announce that,
// or X sleeps on.
func TestFair_releaseAfterExpiryWakesTheNext(t *testing.T) {
	redistest.SkipShort(t)
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			servers := redistest.Start(t, n)
			h := leadClient(t, servers, true)
			fd := clock.NewFake(time.Now().Add(time.Hour)) // X arrives after the holder
			d := leadClient(t, servers, true, WithClock(fd))
			inD := settledCount(d)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			const key = "fair:expired"
			held, err := h.TryAcquire(ctx, key, WithFair(), WithTTL(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			x := fairWaiter(ctx, d, key)
			waitCount(t, "X waits", inD, 1)
			if !redistest.WaitFor(ctx5s(t), absentEverywhere(servers, key)) {
				t.Fatal("the holder's key did not expire")
			}
			_ = held.Release(ctx) // late: it deletes nothing
			getsIt(ctx, t, "X, first once the holder's entry went from a free key,", x)
		})
	}
}

// absentEverywhere reports, when called, whether no master has key.
func absentEverywhere(servers []*redistest.Server, key string) func() bool {
	return func() bool {
		for _, s := range servers {
			if n, err := redis.Int(s.Do("EXISTS", key)); err != nil || n != 0 {
				return false
			}
		}
		return true
	}
}
