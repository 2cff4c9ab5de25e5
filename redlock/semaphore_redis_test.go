package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/observe"
	"github.com/quorumlock/quorumlock/redlock"
)

// Semaphores (k quorum-locked slots) against real masters.

func newSemaphore(t *testing.T, c *redlock.Client, key string, k int, opts ...redlock.LockOption) *redlock.Semaphore {
	t.Helper()
	s, err := c.NewSemaphore(key, k, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSemaphore_grantsKPermitsOnDistinctSlots(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forEachN(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			s := newSemaphore(t, rs.client(t, path), "jobs", 3, redlock.WithFencing(), redlock.WithMetadata("host=a"))
			other := newSemaphore(t, rs.client(t, path), "jobs", 3)
			held := map[int]*redlock.Permit{}
			for i := 0; i < 3; i++ {
				p, err := s.TryAcquire(ctx)
				if err != nil {
					t.Fatalf("permit %d: %v", i, err)
				}
				if held[p.Slot()] != nil {
					t.Fatalf("slot %d granted twice", p.Slot())
				}
				if p.Fence() == 0 || p.Key() != layout.PermitKey("jobs", p.Slot()) || p.Semaphore() != "jobs" {
					t.Fatalf("permit: fence %d, key %q, semaphore %q", p.Fence(), p.Key(), p.Semaphore())
				}
				held[p.Slot()] = p
			}
			if _, err := other.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("a fourth permit: %v, want ErrNotAcquired", err)
			}
			// Who holds each slot, for redlock status.
			for slot, p := range held {
				in, err := rs.client(t, path).Inspect(ctx, p.Key())
				if err != nil {
					t.Fatal(err)
				}
				if m := in.Masters[0].State; len(m.Holders) != 1 || m.Holders[0].Meta != "host=a" {
					t.Fatalf("slot %d on master 0: %+v", slot, m)
				}
			}
			if err := held[1].Release(ctx); err != nil {
				t.Fatal(err)
			}
			p, err := other.TryAcquire(ctx)
			if err != nil || p.Slot() != 1 {
				t.Fatalf("after slot 1's release: %v, %v", p, err)
			}
			for _, q := range []*redlock.Permit{held[0], held[2], p} {
				if err := q.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	})
}

func TestSemaphore_waiterWokenByAnySlotsRelease(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			s := newSemaphore(t, rs.client(t, path), "jobs", 3)
			var held []*redlock.Permit
			for i := 0; i < 3; i++ {
				p, err := s.TryAcquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, p)
			}
			// The waiter's backoff never fires (a fake clock): only a
			// release's notice can wake it.
			fake := clock.NewFake(time.Unix(1_700_000_000, 0))
			w := newSemaphore(t, rs.client(t, path, redlock.WithClock(fake)), "jobs", 3)
			got := make(chan *redlock.Permit, 1)
			errc := make(chan error, 1)
			go func() {
				p, err := w.Acquire(ctx)
				errc <- err
				got <- p
			}()
			waitUntil(t, "the waiter subscribed to every slot on every master", func() bool {
				for i := range rs.servers {
					for slot := 0; slot < 3; slot++ {
						if numSub(t, rs, i, layout.WakeChannel(layout.PermitKey("jobs", slot))) != 1 {
							return false
						}
					}
				}
				return fake.Pending() >= 1
			})
			freed := held[1]
			if err := freed.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errc:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the release did not wake the waiter")
			}
			p := <-got
			if p.Slot() != freed.Slot() {
				t.Fatalf("woken waiter got slot %d, the released one was %d", p.Slot(), freed.Slot())
			}
			for _, q := range []*redlock.Permit{held[0], held[2], p} {
				if err := q.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	})
}

func TestSemaphore_smallerCountLeavesHigherSlotsToDrain(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		c := rs.client(t, path)
		three := newSemaphore(t, c, "pool", 3)
		bySlot := map[int]*redlock.Permit{}
		for i := 0; i < 3; i++ {
			p, err := three.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			bySlot[p.Slot()] = p
		}
		// A larger count has room in the slots above.
		four := newSemaphore(t, c, "pool", 4)
		p3, err := four.TryAcquire(ctx)
		if err != nil || p3.Slot() != 3 {
			t.Fatalf("k=4 while k=3 is full: %v, %v", p3, err)
		}
		two := newSemaphore(t, c, "pool", 2)
		if err := bySlot[2].Release(ctx); err != nil {
			t.Fatal(err)
		}
		// A smaller count never takes a slot at or above it.
		if p, err := two.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("k=2 with slots 0 and 1 held: %v, %v", p, err)
		}
		if err := bySlot[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
		p0, err := two.TryAcquire(ctx)
		if err != nil || p0.Slot() != 0 {
			t.Fatalf("k=2 after slot 0's release: %v, %v", p0, err)
		}
		for _, p := range []*redlock.Permit{p0, bySlot[1], p3} {
			if err := p.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestSemaphore_doHoldsPermitThroughTTLsAndReleases(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			c := rs.client(t, path, redlock.WithTimeout(100*time.Millisecond))
			const ttl = 600 * time.Millisecond
			s := newSemaphore(t, c, "jobs", 1, redlock.WithTTL(ttl))
			other := newSemaphore(t, rs.client(t, path), "jobs", 1)
			err := s.Do(ctx, func(ctx context.Context) error {
				p, ok := redlock.PermitFromContext(ctx)
				if l, okl := redlock.LockFromContext(ctx); !ok || !okl || l != p.Lock {
					t.Error("fn's context carries no permit")
					return nil
				}
				deadline := time.Now().Add(3 * ttl)
				for time.Now().Before(deadline) {
					if _, err := other.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
						t.Errorf("another permit while Do holds the only one: %v", err)
						return nil
					}
					select {
					case <-ctx.Done():
						t.Errorf("lost: %v", context.Cause(ctx))
						return nil
					case <-time.After(ttl / 4):
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			p, err := other.TryAcquire(ctx)
			if err != nil {
				t.Fatalf("after Do: %v", err)
			}
			_ = p.Release(ctx)
		})
	})
}

func TestSemaphore_refusesBadArgumentsSendingNothing(t *testing.T) {
	rs := startReal(t, 1)
	c := rs.client(t, pipelinedPath)
	for _, tc := range []struct {
		name string
		key  string
		k    int
		opts []redlock.LockOption
	}{
		{"no permits", "s", 0, nil},
		{"too many permits", "s", redlock.MaxPermits + 1, nil},
		{"empty key", "", 3, nil},
		{"fair", "s", 3, []redlock.LockOption{redlock.WithFair()}},
		{"bad TTL", "s", 3, []redlock.LockOption{redlock.WithTTL(-time.Second)}},
	} {
		if _, err := c.NewSemaphore(tc.key, tc.k, tc.opts...); !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
		}
	}
	if n, err := rs.servers[0].Do("DBSIZE"); err != nil || n.(int64) != 0 {
		t.Fatalf("DBSIZE %v, %v", n, err)
	}
}

func TestSemaphore_reportsOneAcquisitionPerCallAndItsLoss(t *testing.T) {
	rs := startReal(t, 3)
	ctx := ctxT(t)
	obs := &recorder{}
	c := rs.client(t, pipelinedPath, redlock.WithObserver(obs), redlock.WithTimeout(100*time.Millisecond))
	s := newSemaphore(t, c, "jobs", 2, redlock.WithTTL(300*time.Millisecond), redlock.WithWait(50*time.Millisecond))
	a, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("a third permit of 2: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-b.Lost() // never extended: lost at its validity's end
	_ = b.Release(ctx)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.acquires) != 3 {
		t.Fatalf("%d acquisition events for 3 calls: %+v", len(obs.acquires), obs.acquires)
	}
	for i, want := range []observe.AcquireOutcome{observe.AcquireAcquired, observe.AcquireAcquired, observe.AcquireContended} {
		e := obs.acquires[i]
		if e.Kind != observe.KindSemaphore || e.Key != "jobs" || e.Outcome != want {
			t.Fatalf("event %d: kind %q key %q outcome %q, want semaphore jobs %q", i, e.Kind, e.Key, e.Outcome, want)
		}
	}
	if obs.acquires[0].ID == 0 || obs.acquires[0].Validity <= 0 {
		t.Fatalf("granted event: %+v", obs.acquires[0])
	}
	if len(obs.releases) < 1 || obs.releases[0].Kind != observe.KindSemaphore || obs.releases[0].ID != obs.acquires[0].ID {
		t.Fatalf("release events: %+v", obs.releases)
	}
	if len(obs.losses) != 1 || obs.losses[0].Kind != observe.KindSemaphore || obs.losses[0].ID != obs.acquires[1].ID {
		t.Fatalf("loss events: %+v", obs.losses)
	}
}

// TestSemaphore_twoReleasesGoToTwoWaitersOfOneClient: a client's waiters
// on one semaphore are woken one per release, and a waiter told of two
// freed slots hands one on: two slots released one after the other go to
// two of the client's three waiters, by the releases' notices alone (a
// fake clock: no backoff or fallback poll fires). On several masters the
// first notice's waiter may be granted by the slot's pilot and refused by
// masters that have not run the release yet, while the quorum's notice
// wakes another waiter whom the pilot refuses for that grant: the first,
// failing, wakes a third (wake.Tried).
func TestSemaphore_twoReleasesGoToTwoWaitersOfOneClient(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			s := newSemaphore(t, rs.client(t, path), "jobs", 3)
			var held []*redlock.Permit
			for i := 0; i < 3; i++ {
				p, err := s.TryAcquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, p)
			}
			fake := clock.NewFake(time.Unix(1_700_000_000, 0))
			w := newSemaphore(t, rs.client(t, path, redlock.WithClock(fake)), "jobs", 3)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			got := make(chan *redlock.Permit, 3)
			for i := 0; i < 3; i++ {
				go func() {
					p, err := w.Acquire(wctx)
					if err == nil {
						got <- p
					}
				}()
			}
			waitUntil(t, "three waiters subscribed to every slot on every master, each waiting for its timer", func() bool {
				for i := range rs.servers {
					for slot := 0; slot < 3; slot++ {
						if numSub(t, rs, i, layout.WakeChannel(layout.PermitKey("jobs", slot))) != 1 {
							return false
						}
					}
				}
				return fake.Pending() >= 3
			})
			for _, p := range held[:2] {
				if err := p.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			slots := map[int]bool{}
			for len(slots) < 2 {
				select {
				case p := <-got:
					slots[p.Slot()] = true
					defer p.Release(context.Background())
				case <-time.After(10 * time.Second):
					t.Fatalf("the two releases gave %d permits to the waiters", len(slots))
				}
			}
			if !slots[held[0].Slot()] || !slots[held[1].Slot()] {
				t.Fatalf("the waiters got slots %v, the released ones were %d and %d", slots, held[0].Slot(), held[1].Slot())
			}
			cancel()
			if err := held[2].Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	})
}
