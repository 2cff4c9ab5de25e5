package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Every master of a pooled Client is silent at once — the host, not one
// master: all three are stopped (SIGSTOP) while an acquisition is in
// flight, as a host so loaded that no master runs for a while looks to
// the client. Each master is then known down to its transport (silent
// for over the per-master timeout with commands in flight), but none is
// more silent than every master is: the next acquisition is
// sent to every master and waits for them, rather than failing at once,
// unsent, as "known down" (which, on a loaded host, failed every
// goroutine's acquisitions one after another without a command written
// until some master answered again). A minority of stopped masters is
// still dropped (TestPooled_acquisitionToADownMasterFailsUnsent,
// TestPooled_connectionsBoundedOnAStoppedMaster).
func TestBusyHost_everyMasterSilentAtOnceIsNotDown(t *testing.T) {
	redistest.SkipShort(t)
	const timeout = 100 * time.Millisecond
	servers, c := warmThenStopEvery(t, timeout)
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := c.TryAcquire(ctx, "busyhost:first")
		first <- err
	}()
	// The first acquisition's commands stay in flight (read up to
	// lateBound past their deadline): every master is known down.
	if !redistest.Within(2*time.Second, func() bool {
		for i := range c.masters {
			if !c.masters[i].knownDown() {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the stopped masters were never known down")
	}
	start := time.Now()
	_, err := c.TryAcquire(ctx, "busyhost:second")
	took := time.Since(start)
	if !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryAcquire with every master stopped: %v, want ErrNotAcquired", err)
	}
	if strings.Contains(err.Error(), "not tried") {
		t.Errorf("every master silent at once was taken for down (after %v): %v", took, err)
	}
	if !strings.Contains(err.Error(), "did not answer in time") {
		t.Errorf("error %q does not say the masters were waited for", err)
	}
	for _, s := range servers {
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-first; !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("the first TryAcquire: %v, want ErrNotAcquired", err)
	}
}

// warmThenStopEvery starts three masters and a pooled Client of them
// with timeout, takes and releases a lock once, and stops (SIGSTOP)
// every master until the test ends (or the test resumes them).
func warmThenStopEvery(t *testing.T, timeout time.Duration) ([]*redistest.Server, *Client) {
	t.Helper()
	servers := redistest.Start(t, 3)
	c := leadClient(t, servers, false, WithTimeout(timeout))
	ctx := context.Background()
	warm, err := c.TryAcquire(ctx, "busyhost:warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Resume() })
	}
	return servers, c
}
