package redlock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// settledCount counts the pauses of c's waiters that began with their
// latest attempt over (SetSettled).
func settledCount(c *Client) *atomic.Int64 {
	n := new(atomic.Int64)
	SetSettled(c, func() { n.Add(1) })
	return n
}

// waitCount waits, bounded, until n reaches want.
func waitCount(t *testing.T, what string, n *atomic.Int64, want int64) {
	t.Helper()
	if !redistest.WaitFor(ctx5s(t), func() bool { return n.Load() >= want }) {
		t.Fatalf("%s: %d pauses, want %d", what, n.Load(), want)
	}
}

// fairWaiter starts a fair Acquire of key on c; the lock (or the error)
// comes on the channel returned.
func fairWaiter(ctx context.Context, c *Client, key string) <-chan *Lock {
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Acquire(ctx, key, WithFair(), WithTTL(time.Minute), WithWait(time.Hour),
			WithBackoff(time.Minute, time.Minute))
		if err != nil {
			l = nil
		}
		got <- l
	}()
	return got
}

// getsIt waits up to 5 s for the lock of a waiter started by fairWaiter
// (what names it in a failure), and releases it.
func getsIt(ctx context.Context, t *testing.T, what string, got <-chan *Lock) {
	t.Helper()
	select {
	case l := <-got:
		if l == nil {
			t.Fatalf("%s failed", what)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s was not woken in 5 s", what)
	}
}

// Waiter X in client D, then B and E in client C, all fair. The holder's
// release wakes X and B; B is refused (X heads the queue) and must keep
// its place in C's local queue: when X releases, B heads the key's queue,
// and C must wake B, not E, who cannot win. The clients' clocks do not
// run: a waiter not woken sleeps on, so B gets the lock only if the
// release's notice reaches it.
func TestFair_wokenHeadKeepsItsPlaceAndIsWokenNext(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 1)
	h := leadClient(t, servers, true, WithTimeout(realTimeoutIn))
	fd := clock.NewFake(time.Unix(1_700_000_000, 0))
	fc := clock.NewFake(time.Unix(1_700_000_001, 0)) // C's waiters arrive after X
	d := leadClient(t, servers, true, WithClock(fd))
	c := leadClient(t, servers, true, WithClock(fc))
	inD, inC := settledCount(d), settledCount(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	held, err := h.Acquire(ctx, "k", WithFair(), WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	x := fairWaiter(ctx, d, "k")
	waitCount(t, "X waits", inD, 1)
	b := fairWaiter(ctx, c, "k")
	waitCount(t, "B waits", inC, 1)
	fc.Advance(time.Millisecond) // E arrives after B
	e := fairWaiter(ctx, c, "k")
	waitCount(t, "E waits", inC, 2)

	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lx := <-x
	if lx == nil {
		t.Fatal("X, the head of the queue, did not get the lock")
	}
	// C's notice of that release woke B, which X's place turned away.
	waitCount(t, "B refused", inC, 3)
	if err := lx.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-b:
		if lb == nil {
			t.Fatal("B failed")
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case lc := <-e:
		t.Fatalf("E got the lock before B (%v)", lc != nil)
	case <-time.After(5 * time.Second):
		t.Fatal("B, the head of the queue, was not woken by X's release")
	}
	if le := <-e; le == nil {
		t.Fatal("E failed")
	} else if err := le.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
