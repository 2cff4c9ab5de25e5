package sim

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// TestSemaphore_vanishedHoldersPermitFreeWithinTTLAndOneRetry: every
// permit of a semaphore is held by a client that then vanishes (it never
// releases, never extends); a waiter of another client is granted one
// within the permit's validity, the drift allowance and one retry of the
// waiter (its fallback poll: half its TTL here), plus the rounds of that
// attempt — on the virtual clock, so the bound holds to the millisecond
// whatever the machine's load.
func TestSemaphore_vanishedHoldersPermitFreeWithinTTLAndOneRetry(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const ttl, permits = time.Second, 3
				r := newRun(Config{Seed: uint64(n)})
				var masters []*Master
				for i := range n {
					m := NewMaster(fmt.Sprintf("sim-master-%d", i), r.rng(100+uint64(i)), false)
					m.Serve()
					m.SetWeather(weather{}) // no reply at its deadline: rounds take a few µs
					masters = append(masters, m)
				}
				client := func(c int) *redlock.Client {
					ts := make([]transport.Transport, n)
					for i, m := range masters {
						ts[i] = NewLink(m, c%2 == 0, r.rng(1000+uint64(c*64+i)), r.stats)
					}
					cl, err := redlock.NewWithTransports(ts, redlock.WithTimeout(timeout))
					if err != nil {
						t.Fatal(err)
					}
					return cl
				}
				ctx := context.Background()
				gone, waiter := client(0), client(1)
				s, err := gone.NewSemaphore("s", permits, redlock.WithTTL(ttl))
				if err != nil {
					t.Fatal(err)
				}
				var until time.Time
				for range permits {
					p, err := s.TryAcquire(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if u := p.Until(); until.IsZero() || u.Before(until) {
						until = u
					}
				}
				w, err := waiter.NewSemaphore("s", permits, redlock.WithTTL(ttl))
				if err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, 10*ttl)
				defer cancel()
				p, err := w.Acquire(wctx)
				if err != nil {
					t.Fatal(err)
				}
				granted := time.Now()
				poll := min(ttl/2, 2*time.Second) // the waiter's fallback poll (internal/waker's fallbackPoll)
				drift := ttl/100 + 2*time.Millisecond
				bound := until.Add(drift + poll + 2*time.Millisecond)
				if granted.Before(until) {
					t.Fatalf("a permit granted %v before the vanished holder's validity ended", until.Sub(granted))
				}
				if granted.After(bound) {
					t.Fatalf("the permit was granted %v after the vanished holder's validity ended, past its TTL and one retry (%v)",
						granted.Sub(until), bound.Sub(until))
				}
				t.Logf("granted %v after the vanished holder's validity ended (bound %v)", granted.Sub(until), bound.Sub(until))
				if err := p.Release(ctx); err != nil {
					t.Fatal(err)
				}
				waiter.Close()
				gone.Close()
				for _, m := range masters {
					m.Stop()
				}
			})
		})
	}
}
