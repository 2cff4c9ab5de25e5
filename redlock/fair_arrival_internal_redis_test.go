package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Two fair waiters of one client arrive in the same microsecond (its
// clock does not run), B then E, on each of 8 keys. The masters order
// equal arrivals by waiter ID, the client by arrival: each waiter must get
// a later arrival than the one before, or on about half the keys the
// release wakes B while E heads the queue, and both sleep to their
// backoff (a minute).
func TestFair_sameMicrosecondWaitersOfAClientAreWokenInTheMastersOrder(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 1)
	h := leadClient(t, servers, true)
	c := leadClient(t, servers, true, WithClock(clock.NewFake(time.Now().Add(time.Hour))))
	in := settledCount(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for k := range 8 {
		key := fmt.Sprintf("fair:same-µs:%d", k)
		held, err := h.TryAcquire(ctx, key, WithFair(), WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		b := fairWaiter(ctx, c, key)
		waitCount(t, "B waits", in, int64(2*k+1))
		e := fairWaiter(ctx, c, key)
		waitCount(t, "E waits", in, int64(2*k+2))
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		getsIt(ctx, t, fmt.Sprintf("key %d: B", k), b)
		getsIt(ctx, t, fmt.Sprintf("key %d: E", k), e)
	}
}
