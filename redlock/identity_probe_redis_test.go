package redlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// A caller whose ctx ends while its first round waits for the run_id
// probe (a SIGSTOPped master never answers it) gets what the acquisitions
// document: an error matching ErrNotAcquired and ctx.Err(), a
// *QuorumError naming the master that did not answer, and nothing left
// behind. Inspect reports the ctx's end per master, never as its error
// (its documented contract).
func TestIdentity_ctxEndsDuringProbe_documentedSentinel_pausedMaster(t *testing.T) {
	const timeout = 4 * time.Second
	forEachPath(t, func(t *testing.T, path connPath) {
		t.Parallel() // its own masters; the one bound has seconds of slack
		servers := redistest.Start(t, 3)
		if err := servers[2].Pause(); err != nil {
			t.Fatal(err)
		}
		defer servers[2].Resume()
		addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
		c, err := redigo.NewFromAddrs(addrs, path.Option(), redlock.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		re, err := c.NewReentrant("ctxp-re", "owner")
		if err != nil {
			t.Fatal(err)
		}
		short := func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}
		// A key of its own for each call: none is refused by another.
		calls := []struct {
			name string
			call func(ctx context.Context) error
		}{
			{"TryAcquire", func(ctx context.Context) error { _, err := c.TryAcquire(ctx, "ctxp-k1"); return err }},
			{"Acquire", func(ctx context.Context) error { _, err := c.Acquire(ctx, "ctxp-k2"); return err }},
			{"AcquireRead", func(ctx context.Context) error { _, err := c.AcquireRead(ctx, "ctxp-rw1"); return err }},
			{"TryAcquireWrite", func(ctx context.Context) error { _, err := c.TryAcquireWrite(ctx, "ctxp-rw2"); return err }},
			{"AcquireMulti", func(ctx context.Context) error {
				_, err := c.AcquireMulti(ctx, []string{"ctxp-a", "ctxp-b"})
				return err
			}},
			{"Do", func(ctx context.Context) error {
				return c.Do(ctx, "ctxp-k3", func(context.Context) error { return nil })
			}},
			{"Reentrant.Acquire", re.Acquire},
		}
		// Every call runs at once, each with a ctx far shorter than the
		// probe's per-master timeout: all of them end while the probe
		// waits, however slowly this machine runs them one after another.
		errs := make([]error, len(calls))
		var inspected redlock.Inspection
		var inspectErr error
		var wg sync.WaitGroup
		start := time.Now()
		for i, tc := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := short()
				defer cancel()
				errs[i] = tc.call(ctx)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := short()
			defer cancel()
			inspected, inspectErr = c.Inspect(ctx, "ctxp-k1")
		}()
		wg.Wait()
		if took := time.Since(start); took >= timeout {
			// The probe may have ended first: what follows would not test
			// a ctx ending during it.
			t.Fatalf("the calls took %v, as long as the probe's timeout (%v): they waited for the probe, not for their 100 ms ctx, "+
				"or this machine ran them too slowly to tell", took, timeout)
		}
		for i, tc := range calls {
			err := errs[i]
			if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: %v, want an error matching ErrNotAcquired and context.DeadlineExceeded", tc.name, err)
				continue
			}
			var qe *redlock.QuorumError
			if !errors.As(err, &qe) {
				t.Errorf("%s: %T is not a *QuorumError", tc.name, err)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, "master 2 ("+addrs[2]+")") || strings.Count(msg, "redlock: ") != 1 {
				t.Errorf("%s: %q does not name the master that did not answer, once", tc.name, msg)
			}
			if !slices.Contains(qe.Unanswered, 2) {
				t.Errorf("%s: Unanswered = %v, want 2 among them", tc.name, qe.Unanswered)
			}
		}
		if inspectErr != nil {
			t.Errorf("Inspect: %v; its error is documented only for invalid arguments", inspectErr)
		} else if inspected.Masters[2].Err == nil {
			t.Errorf("Inspect: master 2 reports no error")
		}
		// What the calls granted was rolled back.
		leftover.None(t, servers[:2], "ctxp-k1", "ctxp-k2", "ctxp-k3", "ctxp-rw1", "ctxp-rw2", "ctxp-a", "ctxp-b", "ctxp-re")
	})
}

// A Reentrant's acquisition is a call that talks to the masters: one
// server under two addresses is refused for it too (internal/ident: "every
// such call fails").
func TestIdentity_reentrantRefusesSameServerTwice(t *testing.T) {
	servers := redistest.Start(t, 2)
	port := strings.TrimPrefix(servers[0].Addr(), "127.0.0.1:")
	addrs := []string{servers[0].Addr(), servers[1].Addr(), "localhost:" + port}
	c, err := redigo.NewFromAddrs(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	re, err := c.NewReentrant("dup-re", "o")
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range []func(context.Context) error{re.TryAcquire, re.Acquire} {
		// Bounded: the refusal is due at first contact; an Acquire that is
		// not refused would otherwise wait for the key as long as it takes.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := call(ctx)
		cancel()
		if !errors.Is(err, redlock.ErrInvalid) || !strings.Contains(err.Error(), "are the same Redis server") {
			t.Errorf("Reentrant on one server twice: %v, want ErrInvalid naming both", err)
			_ = re.Release(context.Background())
		}
	}
	if n, err := servers[0].Do("EXISTS", "dup-re"); err != nil || n.(int64) != 0 {
		t.Errorf("EXISTS dup-re = %v, %v: the refused call wrote", n, err)
	}
}
