package redlock_test

// The validity rule for commands that change a key's expiry without a
// quorum's confirmation in time (docs/safety.md, "Expiry changes that were
// not confirmed"), against real masters that are frozen (SIGSTOP) while
// the command sits in their sockets and run it when they resume.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/redlock"
)

// pauseMasters freezes the masters at idx and resumes them at cleanup
// (unless resume ran first).
func pauseMasters(t *testing.T, rs *realSet, idx ...int) (resume func()) {
	t.Helper()
	for _, i := range idx {
		if err := rs.servers[i].Pause(); err != nil {
			t.Fatal(err)
		}
	}
	resumed := false
	resume = func() {
		if resumed {
			return
		}
		resumed = true
		for _, i := range idx {
			if err := rs.servers[i].Resume(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)
	return resume
}

// takeOver polls take until it succeeds and returns when it did, failing
// the test after limit.
func takeOver(t *testing.T, limit time.Duration, take func() error) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := take()
		if err == nil {
			return time.Now()
		}
		if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("second client: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second client never got the lock within %v: %v", limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkNoOverlap checks that l's validity ended no later than takenAt,
// when another client held the key, and that l reports itself lost.
func checkNoOverlap(t *testing.T, l *redlock.Lock, takenAt time.Time) {
	t.Helper()
	if u := l.Until(); u.After(takenAt) {
		t.Errorf("another client took the key while this lock still counts as valid for %v", u.Sub(takenAt))
	}
	select {
	case <-l.Lost():
		if !errors.Is(l.Err(), redlock.ErrLockLost) {
			t.Errorf("Err = %v, want ErrLockLost", l.Err())
		}
	case <-time.After(time.Second):
		t.Errorf("Lost not closed a second after another client took the key (Until in %v)", time.Until(l.Until()))
	}
}

func TestLockExtend_unconfirmedShorterTTLShortensValidity(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path, redlock.WithTimeout(200*time.Millisecond))
		other := rs.client(t, path, redlock.WithTimeout(200*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := c.Acquire(ctx, "k", redlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Lost() // the watcher runs, and must follow the validity down
		resume := pauseMasters(t, rs, 1, 2)
		err = l.Extend(ctx, time.Second)
		sent := time.Now()
		if !errors.Is(err, redlock.ErrNotExtended) {
			t.Fatalf("Extend with a frozen majority = %v, want ErrNotExtended", err)
		}
		// The frozen masters may still run PEXPIRE 1000: at most a second of
		// validity is left.
		if left := l.Until().Sub(sent); left > time.Second {
			t.Errorf("after an unconfirmed extension to 1s, Until is %v away", left)
		}
		resume()
		takenAt := takeOver(t, 12*time.Second, func() error {
			l2, err := other.TryAcquire(ctx, "k", redlock.WithTTL(10*time.Second))
			if err == nil {
				t.Cleanup(func() { _ = l2.Release(context.Background()) })
			}
			return err
		})
		t.Logf("the second client took the key %v after the unconfirmed extension", takenAt.Sub(sent).Round(time.Millisecond))
		checkNoOverlap(t, l, takenAt)
	})
}

func TestReentrant_failedReenterShortensValidity(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path, redlock.WithTimeout(200*time.Millisecond))
		other := rs.client(t, path, redlock.WithTimeout(200*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := c.NewReentrant("k", "first", redlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		l := r.Lock()
		// Held for 30 s now; taking it again sends the lock's own TTL (1 s).
		if err := l.Extend(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		_ = l.Lost()
		resume := pauseMasters(t, rs, 1, 2)
		err = r.Acquire(ctx)
		sent := time.Now()
		if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("re-enter with a frozen majority = %v, want ErrNotAcquired", err)
		}
		if left := l.Until().Sub(sent); left > time.Second {
			t.Errorf("after an unconfirmed re-enter with a TTL of 1s, Until is %v away", left)
		}
		resume()
		r2, err := other.NewReentrant("k", "second", redlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		takenAt := takeOver(t, 12*time.Second, func() error { return r2.Acquire(ctx) })
		t.Logf("the second owner took the key %v after the unconfirmed re-enter", takenAt.Sub(sent).Round(time.Millisecond))
		t.Cleanup(func() { _ = r2.Release(context.Background()) })
		checkNoOverlap(t, l, takenAt)
	})
}

func TestWatchdog_unconfirmedShorterTTLShortensValidity(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path, redlock.WithTimeout(200*time.Millisecond))
		ctx := ctxT(t)
		const ttl = 1500 * time.Millisecond
		period := ttl / 3
		l, err := c.Acquire(ctx, "k", redlock.WithTTL(ttl), redlock.WithAutoExtend(0))
		if err != nil {
			t.Fatal(err)
		}
		// Extended by hand far beyond the TTL the watchdog sends.
		if err := l.Extend(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		paused := time.Now()
		pauseMasters(t, rs, 1, 2)
		select {
		case <-l.Lost():
		case <-time.After(10 * time.Second):
			t.Fatal("the watchdog never gave the lock up")
		}
		// The watchdog's first extension (PEXPIRE 1500, started within a
		// period of the pause) reached no quorum but may still run on the
		// frozen masters.
		if latest := paused.Add(period + ttl); l.Until().After(latest) {
			t.Errorf("Until is %v after the pause, want at most %v (an unconfirmed extension to %v)",
				l.Until().Sub(paused).Round(time.Millisecond), period+ttl, ttl)
		}
		t.Logf("lost %v after the pause: %v", time.Since(paused).Round(time.Millisecond), l.Err())
	})
}

func TestReentrant_reenterConfirmedTooLateIsLost(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		clk := &roundStallClock{Clock: clock.Real()}
		c := rs.client(t, path, redlock.WithClock(clk))
		ctx := ctxT(t)
		r, err := c.NewReentrant("k", "first", redlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		l := r.Lock()
		if err := l.Extend(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		// Every master sets the TTL to 1 s again, but the client looks at the
		// time only 1.5 s after it started.
		clk.arm(1500 * time.Millisecond)
		err = r.Acquire(ctx)
		if !errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("re-enter confirmed too late = %v, want ErrLockLost", err)
		}
		select {
		case <-l.Lost():
		default:
			t.Fatalf("Lost not closed; Until %v away", l.Until().Sub(clk.Now()))
		}
		if n := r.Count(); n != 1 {
			t.Errorf("Count = %d after a failed re-enter, want 1", n)
		}
	})
}
