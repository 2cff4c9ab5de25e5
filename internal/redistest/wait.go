package redistest

import (
	"context"
	"testing"
	"time"
)

// Eventually polls cond (see WaitFor) until it holds, failing t with what
// if it does not within d. It is how a test waits for state that settles
// asynchronously — the last master of a round that returned at a quorum,
// a waiter registered, a connection taken — never a fixed sleep.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if !WaitFor(ctx, cond) {
		t.Fatalf("not within %v: %s", d, what)
	}
}

// Within polls cond (see WaitFor) for up to d and reports whether it held:
// Eventually for a test that reports the failure itself.
func Within(d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return WaitFor(ctx, cond)
}
