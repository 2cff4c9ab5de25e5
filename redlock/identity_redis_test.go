package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// Two addresses of one server ("localhost:P" and "127.0.0.1:P") would
// count one master twice toward a quorum. New cannot tell them apart by
// address; at first contact the client compares the servers' run_ids and
// from then on refuses every call that talks to the masters, naming both.
func TestClient_sameServerUnderTwoAddressesIsRefused(t *testing.T) {
	servers := redistest.Start(t, 2)
	port := strings.TrimPrefix(servers[0].Addr(), "127.0.0.1:")
	addrs := []string{servers[0].Addr(), servers[1].Addr(), "localhost:" + port}
	forEachPath(t, func(t *testing.T, path connPath) {
		c, err := redlock.NewFromAddrs(addrs, path.Option())
		if err != nil {
			t.Fatalf("New must not block or probe: %v", err)
		}
		defer c.Close()
		ctx := context.Background()
		for name, call := range map[string]func() error{
			"TryAcquire": func() error { _, err := c.TryAcquire(ctx, "dup-k"); return err },
			"Acquire":    func() error { _, err := c.Acquire(ctx, "dup-k", redlock.WithWait(0)); return err },
			"Inspect":    func() error { _, err := c.Inspect(ctx, "dup-k"); return err },
		} {
			err := call()
			if !errors.Is(err, redlock.ErrInvalid) {
				t.Fatalf("%s: %v, want an error matching ErrInvalid", name, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "masters 0 ("+addrs[0]+") and 2 ("+addrs[2]+") are the same Redis server") ||
				strings.Count(msg, "redlock: ") != 1 {
				t.Errorf("%s: %q does not name both masters once", name, msg)
			}
		}
		// Nothing was left on the server.
		if n, err := servers[0].Do("EXISTS", "dup-k"); err != nil || n.(int64) != 0 {
			t.Errorf("EXISTS dup-k = %v, %v: the refused call wrote", n, err)
		}
	})
}

// Distinct servers pass the check, and a hung master (SIGSTOP) at first
// contact costs the first call one bounded probe, not more: it is asked
// again in the background.
func TestClient_identityProbeIsBounded(t *testing.T) {
	servers := redistest.Start(t, 3)
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[2].Resume()
	forEachPath(t, func(t *testing.T, path connPath) {
		addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
		const timeout = 300 * time.Millisecond
		c, err := redlock.NewFromAddrs(addrs, path.Option(), redlock.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		start := time.Now()
		l, err := c.TryAcquire(ctx, "probe-k")
		if err != nil {
			t.Fatal(err)
		}
		first := time.Since(start)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The probe (one timeout) and the round (at most one more).
		if first > 2*timeout+time.Second {
			t.Errorf("the first call took %v with a hung master", first)
		}
		time.Sleep(1100 * time.Millisecond) // the hung master is due for a background probe
		start = time.Now()
		l, err = c.TryAcquire(ctx, "probe-k")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// A probe in the foreground would cost the hung master's timeout
		// again; the round itself is decided by the two that answer.
		if took := time.Since(start); took >= timeout {
			t.Errorf("a later call took %v: the hung master's probe is not in the background", took)
		}
	})
}
