package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/wake"
	"github.com/quorumlock/quorumlock/internal/waker"
)

// pauseClient is a client of one held master on a fake clock, and a
// waiter that no release has woken, for Acquire's pause between attempts.
func pauseClient(t *testing.T) (*Client, *clock.Fake, *waker.Waiting) {
	t.Helper()
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	c, err := NewWithTransports([]Transport{&heldTransport{addr: "held:6379"}}, WithClock(fake))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, fake, c.waker.Wait(nil, waker.Mark{Live: true}, wake.Plain, 0)
}

// pauseAsync runs pause on its own goroutine and returns its result.
func pauseAsync(ctx context.Context, c *Client, wt *waker.Waiting, delay time.Duration) <-chan waker.Resume {
	ch := make(chan waker.Resume, 1)
	go func() {
		why, lead := c.pause(ctx, wt, "pause:key", plainKind{}, delay, time.Now())
		if why != waker.ResumeReleased && lead != -1 {
			why = 255 // a lead without a release
		}
		ch <- why
	}()
	return ch
}

// Each way out of the pause between two attempts ends it with its own
// reason, and only a release names a master to ask first.
func TestPause_endsForEachReasonItWaitsFor(t *testing.T) {
	bound := func(t *testing.T, ch <-chan waker.Resume, want waker.Resume) {
		t.Helper()
		select {
		case got := <-ch:
			if got != want {
				t.Fatalf("pause ended with %d, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("pause did not end (want %d)", want)
		}
	}
	t.Run("delay", func(t *testing.T) {
		c, fake, wt := pauseClient(t)
		ch := pauseAsync(context.Background(), c, wt, time.Second)
		if err := fake.BlockUntil(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		fake.Advance(time.Second)
		bound(t, ch, waker.ResumeDelay)
	})
	t.Run("released", func(t *testing.T) {
		c, _, wt := pauseClient(t)
		ch := pauseAsync(context.Background(), c, wt, time.Hour)
		wt.C() <- struct{}{}
		bound(t, ch, waker.ResumeReleased)
	})
	t.Run("closing", func(t *testing.T) {
		c, _, wt := pauseClient(t)
		ch := pauseAsync(context.Background(), c, wt, time.Hour)
		c.Close()
		bound(t, ch, waker.ResumeClosing)
	})
	t.Run("ctx", func(t *testing.T) {
		c, _, wt := pauseClient(t)
		ctx, cancel := context.WithCancel(context.Background())
		ch := pauseAsync(ctx, c, wt, time.Hour)
		cancel()
		bound(t, ch, waker.ResumeCtx)
	})
	t.Run("recheck", func(t *testing.T) {
		c, _, wt := pauseClient(t)
		wt.Recheck = true // no key followed: live at once
		bound(t, pauseAsync(context.Background(), c, wt, time.Hour), waker.ResumeRecheck)
		if wt.Recheck {
			t.Fatal("the recheck was not used up")
		}
	})
}
