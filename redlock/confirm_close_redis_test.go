package redlock_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestConfirm_closeWithAConfirmationQueued: Close while the confirming
// rollback of a failed attempt waits its turn returns at once, drops it
// (it is never sent), leaves no retry pending and no goroutine. The
// finisher's backoff is stretched to 2 s so that the confirmation is
// surely queued when Close runs.
func TestConfirm_closeWithAConfirmationQueued(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		s := redistest.StartOne(t)
		key := "cf:close:" + path.name
		var rollbacks atomic.Int32
		var holds sync.WaitGroup
		holds.Add(1)
		var first atomic.Bool
		hook := func(c *hostile.Conn, cmd []string) hostile.Verdict {
			switch {
			case cmd[0] == "SET" && len(cmd) > 1 && cmd[1] == key && first.CompareAndSwap(false, true):
				defer holds.Done()
				return holdReply(c, heldFor)
			case cmd[0] == "EVALSHA" && len(cmd) > 5 && cmd[3] == key && cmd[5] == "":
				rollbacks.Add(1)
			}
			return hostile.Forward
		}
		p := hostile.NewProxy(t, s.Addr(), hook)
		ignore := goleak.IgnoreCurrent()
		var logs syncBuffer
		c, err := redigo.NewFromAddrs([]string{p.Addr()}, redlock.WithTimeout(confirmTimeout), path.Option(),
			redlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		redlock.SetFinishBackoff(c, 2*time.Second, 4*time.Second)
		warmUp(t, c, key+":warm")
		if _, err := c.TryAcquire(context.Background(), key, redlock.WithTTL(time.Minute)); err == nil {
			t.Fatal("granted by a master whose SET was held")
		}
		waitUntil(t, "the rollback answered and its confirmation queued", func() bool {
			return rollbacks.Load() == 1 && redlock.Finishing(c) == 1
		})
		holds.Wait() // the held SET dropped: the proxy idles
		start := time.Now()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if took > 500*time.Millisecond {
			t.Errorf("Close took %v with a confirmation queued", took)
		}
		if n := redlock.Finishing(c); n != 0 {
			t.Errorf("%d retries pending after Close", n)
		}
		goleak.VerifyNone(t, ignore)
		time.Sleep(2500 * time.Millisecond) // the subject: the confirmation's due time passes
		if n := rollbacks.Load(); n != 1 {
			t.Errorf("%d rollbacks reached the master, want 1: the confirmation went out after Close", n)
		}
		t.Logf("Close took %v; its log: %s", took, strings.TrimSpace(logs.String()))
	})
}

// TestConfirm_closeWithAConfirmationInFlight: Close while the confirming
// rollback was sent and its master does not answer (a proxy holds it)
// returns within a few per-master timeouts, completes it, leaves no retry
// pending and no goroutine.
func TestConfirm_closeWithAConfirmationInFlight(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		s := redistest.StartOne(t)
		key := "cf:closeinflight:" + path.name
		var rollbacks atomic.Int32
		var first atomic.Bool
		confirmHeld := make(chan struct{})
		hook := func(c *hostile.Conn, cmd []string) hostile.Verdict {
			switch {
			case cmd[0] == "SET" && len(cmd) > 1 && cmd[1] == key && first.CompareAndSwap(false, true):
				return holdReply(c, heldFor)
			case cmd[0] == "EVALSHA" && len(cmd) > 5 && cmd[3] == key && cmd[5] == "":
				if rollbacks.Add(1) == 2 {
					close(confirmHeld)
					<-c.Quit() // never answered
					return hostile.HangUp
				}
			}
			return hostile.Forward
		}
		p := hostile.NewProxy(t, s.Addr(), hook)
		c, err := redigo.NewFromAddrs([]string{p.Addr()}, redlock.WithTimeout(confirmTimeout), path.Option())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		warmUp(t, c, key+":warm")
		if _, err := c.TryAcquire(context.Background(), key, redlock.WithTTL(time.Minute)); err == nil {
			t.Fatal("granted by a master whose SET was held")
		}
		select {
		case <-confirmHeld:
		case <-time.After(5 * time.Second):
			t.Fatalf("no confirmation sent (%d rollbacks)", rollbacks.Load())
		}
		start := time.Now()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		t.Logf("Close took %v with a confirmation in flight", took)
		if took > 2*time.Second {
			t.Errorf("Close took %v with a confirmation in flight", took)
		}
		if n := redlock.Finishing(c); n != 0 {
			t.Errorf("%d retries pending after Close", n)
		}
	})
}
