package goredis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// nextLeader receives from an Observe channel within d; ok false when it
// closed.
func nextLeader(t *testing.T, ch <-chan election.Leader, d time.Duration) (election.Leader, bool) {
	t.Helper()
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case ld, ok := <-ch:
		return ld, ok
	case <-tm.C:
		t.Fatalf("Observe sent nothing and stayed open for %v", d)
	}
	return election.Leader{}, false
}

// A Client over go-redis clients, which its Close leaves open, leaves no
// goroutine it started once closed: its election's observer, an
// auto-extended lock's watchdog, a waiter's subscriptions. (What a closed
// client's Observe, Leader and Inspect do is in the conformance suite.)
func TestClient_closeEndsEveryGoroutine(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			ms := startMasters(t, n)
			ctx := ctxFor(t)
			for _, a := range ms.admin {
				if err := a.Set(ctx, "close-busy", "someone-else", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			ignore := goleak.IgnoreCurrent()
			c := ms.lockClient(t)
			e, err := election.New(c, "close-leader", election.WithTTL(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			seen := e.Observe(context.Background())
			ld, err := e.Campaign(ctx, "me")
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := nextLeader(t, seen, 10*time.Second); !ok || got.Term != ld.Term() {
				t.Fatalf("observed %+v (open %v), want term %d", got, ok, ld.Term())
			}
			auto, err := c.Acquire(ctx, "close-auto", redlock.WithTTL(time.Second), redlock.WithAutoExtend(0))
			if err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 1)
			go func() {
				_, err := c.Acquire(context.Background(), "close-busy")
				waited <- err
			}()
			waitFor(t, "the waiter subscribed", func() bool {
				for _, a := range ms.admin {
					subs, err := a.PubSubNumSub(ctx, layout.WakeChannel("close-busy")).Result()
					if err != nil || subs[layout.WakeChannel("close-busy")] != 1 {
						return false
					}
				}
				return true
			})

			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-waited:
				if !errors.Is(err, redlock.ErrClosed) {
					t.Errorf("waiter: %v, want ErrClosed", err)
				}
			case <-ctx.Done():
				t.Fatal("the waiter's Acquire did not end at Close")
			}
			if !errors.Is(auto.Err(), redlock.ErrClosed) {
				t.Errorf("auto-extended lock after Close: %v", auto.Err())
			}
			for {
				if _, ok := nextLeader(t, seen, 5*time.Second); !ok {
					break
				}
			}
			goleak.VerifyNone(t, ignore)
		})
	}
}
