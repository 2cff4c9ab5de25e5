package otel_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// A reentrant lock taken again renews its validity
// (as Lock.Extend does); the gauge must go on counting it past the first
// hold's validity while the owner keeps taking it again, and drop it at
// the last release.
func TestActive_reentrantReentriesRenewTheGauge(t *testing.T) {
	h := newHarness(t, 3)
	c := h.client(500 * time.Millisecond)
	ctx := context.Background()
	const ttl = 2 * time.Second
	re, err := c.NewReentrant("re-active", "owner", redlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if err := re.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	first := re.Lock().Until()
	for time.Now().Before(first.Add(500 * time.Millisecond)) {
		time.Sleep(400 * time.Millisecond)      // the subject: re-entries spaced past the first hold's validity
		if err := re.Acquire(ctx); err != nil { // renews the validity to ttl
			t.Fatal(err)
		}
	}
	if left := time.Until(re.Lock().Until()); left <= 0 {
		t.Fatalf("the reentrant lock's validity ended (%v): the renewals failed", left)
	}
	if got := h.value("quorumlock.locks.active"); got != 1 {
		t.Errorf("active locks past the first hold's validity, the lock renewed by re-entries: %d, want 1", got)
	}
	for re.Count() > 0 {
		if err := re.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.value("quorumlock.locks.active"); got != 0 {
		t.Errorf("active locks after the last release: %d, want 0", got)
	}
	if got := h.obs.TrackedLocks(); got != 0 {
		t.Errorf("%d locks still tracked", got)
	}
}
