package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
)

// pauseClient is a client of one held master on a fake clock, and a
// waiter that no release has woken, for Acquire's pause between attempts.
func pauseClient(t *testing.T) (*Client, *clock.Fake, *waiting) {
	t.Helper()
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	c, err := NewWithTransports([]Transport{&heldTransport{addr: "held:6379"}}, WithClock(fake))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, fake, &waiting{w: c.waker, ch: make(chan struct{}, 1)}
}

// pauseAsync runs pause on its own goroutine and returns its result.
func pauseAsync(ctx context.Context, c *Client, wt *waiting, delay time.Duration) <-chan resume {
	ch := make(chan resume, 1)
	go func() {
		why, lead := c.pause(ctx, wt, "pause:key", plainKind{}, delay, time.Now())
		if why != resumeReleased && lead != -1 {
			why = 255 // a lead without a release
		}
		ch <- why
	}()
	return ch
}

// Each way out of the pause between two attempts ends it with its own
// reason, and only a release names a master to ask first.
func TestPause_endsForEachReasonItWaitsFor(t *testing.T) {
	bound := func(t *testing.T, ch <-chan resume, want resume) {
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
		bound(t, ch, resumeDelay)
	})
	t.Run("released", func(t *testing.T) {
		c, _, wt := pauseClient(t)
		ch := pauseAsync(context.Background(), c, wt, time.Hour)
		wt.ch <- struct{}{}
		bound(t, ch, resumeReleased)
	})
	t.Run("closing", func(t *testing.T) {
		c, _, wt := pauseClient(t)
		ch := pauseAsync(context.Background(), c, wt, time.Hour)
		c.Close()
		bound(t, ch, resumeClosing)
	})
	t.Run("ctx", func(t *testing.T) {
		c, _, wt := pauseClient(t)
		ctx, cancel := context.WithCancel(context.Background())
		ch := pauseAsync(ctx, c, wt, time.Hour)
		cancel()
		bound(t, ch, resumeCtx)
	})
	t.Run("recheck", func(t *testing.T) {
		c, _, wt := pauseClient(t)
		wt.recheck = true // no key followed: live at once
		bound(t, pauseAsync(context.Background(), c, wt, time.Hour), resumeRecheck)
		if wt.recheck {
			t.Fatal("the recheck was not used up")
		}
	})
}
