package otel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/otel"
	"github.com/quorumlock/quorumlock/redlock"
)

// A lock left unreleased (its holder stopped) leaves the active
// locks once its validity ends, with no event from the client; releasing
// it later does not count it twice.
func TestObserver_active_unreleased_lock_expires(t *testing.T) {
	h := newHarness(t, 3)
	c := h.client(500 * time.Millisecond)
	ctx := context.Background()
	short, err := c.Acquire(ctx, "short", redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	long, err := c.Acquire(ctx, "long", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got := h.value("quorumlock.locks.active"); got != 2 {
		t.Fatalf("active locks: %d, want 2", got)
	}
	waitFor(t, "the unreleased lock's expiry", func() bool { return h.value("quorumlock.locks.active") == 1 })
	if time.Now().Before(short.Until()) {
		t.Errorf("the gauge dropped before the lock's validity ended (%v left)", time.Until(short.Until()))
	}
	if got := h.value("quorumlock.losses"); got != 0 {
		t.Errorf("losses: %d, want 0 (nothing watched the lock)", got)
	}
	_ = short.Release(ctx) // late: the key expired
	if got := h.value("quorumlock.locks.active"); got != 1 {
		t.Errorf("active locks after the late release: %d, want 1", got)
	}
	if err := long.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.value("quorumlock.locks.active"); got != 0 {
		t.Errorf("active locks: %d, want 0", got)
	}
	if got := h.obs.TrackedLocks(); got != 0 {
		t.Errorf("%d locks still tracked", got)
	}
}

// An extended lock is counted past its first validity; a lost one (an
// Extend after its validity) and a released one leave the gauge once, and
// the count never goes below zero.
func TestObserver_active_extended_lost_released(t *testing.T) {
	h := newHarness(t, 3)
	c := h.client(500 * time.Millisecond)
	ctx := context.Background()
	ext, err := c.Acquire(ctx, "ext", redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lost, err := c.Acquire(ctx, "lost", redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the unextended lock's expiry", func() bool { return time.Now().After(lost.Until()) })
	if got := h.value("quorumlock.locks.active"); got != 1 {
		t.Errorf("active locks after the first TTL: %d, want 1 (the extended one)", got)
	}
	if err := lost.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after the validity: %v", err)
	}
	_ = lost.Release(ctx)
	if got := h.value("quorumlock.locks.active"); got != 1 {
		t.Errorf("active locks after the loss: %d, want 1", got)
	}
	if err := ext.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = ext.Release(ctx) // a second release sends nothing
	if got := h.value("quorumlock.locks.active"); got != 0 {
		t.Errorf("active locks: %d, want 0", got)
	}
	if got := h.value("quorumlock.losses"); got != 1 {
		t.Errorf("losses: %d, want 1", got)
	}
	if got := h.value("quorumlock.lock.hold.duration"); got != 1 {
		t.Errorf("hold times: %d, want 1", got)
	}
}

// Many unreleased locks: the observer keeps at most WithMaxActiveLocks of
// them, and none once their validity ended and the next event pruned them.
func TestActive_unreleasedLocksBoundedAndPruned(t *testing.T) {
	const max = 50
	h := newHarness(t, 3, otel.WithMaxActiveLocks(max))
	c := h.client(500 * time.Millisecond)
	ctx := context.Background()
	var last *redlock.Lock
	for i := 0; i < 4*max; i++ {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("order:%d", i), redlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		last = l
		if got := h.obs.TrackedLocks(); got > max {
			t.Fatalf("%d locks tracked, want at most %d", got, max)
		}
	}
	if got := h.value("quorumlock.locks.active"); got > max || got <= 0 {
		t.Errorf("active locks: %d, want 1..%d", got, max)
	}
	waitFor(t, "the locks' expiry", func() bool { return time.Now().After(last.Until()) })
	if got := h.value("quorumlock.locks.active"); got != 0 {
		t.Errorf("active locks after their validity: %d, want 0", got)
	}
	if got := h.obs.TrackedLocks(); got != 0 {
		t.Errorf("%d locks tracked after their validity, want 0", got)
	}
}
