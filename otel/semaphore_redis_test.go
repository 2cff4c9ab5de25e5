package otel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/observe"
	"github.com/quorumlock/quorumlock/otel"
	"github.com/quorumlock/quorumlock/redlock"
)

// A semaphore's acquisitions, waits and losses are series of kind
// "semaphore": one acquisition per call (not one per slot it tried), its
// permits among the active locks, and a permit's loss.
func TestObserver_semaphoreAcquisitionsWaitsAndLosses(t *testing.T) {
	h := newHarness(t, 3)
	c := h.client(200 * time.Millisecond)
	ctx := context.Background()
	s, err := c.NewSemaphore("jobs:encode", 2, redlock.WithTTL(time.Second), redlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sem := otel.KeyLockKind.String(observe.KindSemaphore)
	if got := h.value("quorumlock.locks.active", sem); got != 2 {
		t.Errorf("active permits: %d, want 2", got)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("a third permit of 2: %v", err)
	}
	// A waiter, woken by a's release.
	got := make(chan error, 1)
	go func() {
		p, err := s.Acquire(ctx)
		if err == nil {
			err = p.Release(ctx)
		}
		got <- err
	}()
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	<-b.Lost() // never extended
	_ = b.Release(ctx)
	if got := h.value("quorumlock.acquire.duration", sem, outcome(observe.AcquireAcquired)); got != 3 {
		t.Errorf("semaphore acquisitions: %d, want 3", got)
	}
	if got := h.value("quorumlock.acquire.duration", sem, outcome(observe.AcquireContended)); got != 1 {
		t.Errorf("refused semaphore acquisitions: %d, want 1", got)
	}
	if got := h.value("quorumlock.acquire.duration"); got != 4 {
		t.Errorf("acquisitions of any kind: %d, want 4 (one per semaphore call, none per slot)", got)
	}
	if got := h.value("quorumlock.losses", sem, otel.KeyLossCause.String(string(observe.LossExpired))); got != 1 {
		t.Errorf("permits lost: %d, want 1", got)
	}
	if got := h.value("quorumlock.releases", sem); got < 2 {
		t.Errorf("permit releases: %d, want at least 2", got)
	}
	if got := h.value("quorumlock.locks.active"); got != 0 {
		t.Errorf("active locks: %d, want 0", got)
	}
}
