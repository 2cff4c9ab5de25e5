package redlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/redlock"
)

// A woken waiter that neither takes the lock nor gives up
// absorbs the release's notice.
//
// The waker wakes one waiter of a key per client per release (at the first
// notice, and at the one completing a quorum). The design's argument
// (docs/design.md, "No release lost between a refusal and the
// subscription") is that a woken waiter "takes the lock, or passes the
// wake-up on if it gives up, or loses to a holder whose release is
// announced in turn". A multi-key waiter woken by the release of k whose
// attempt fails because another of its keys (l) is still held does none
// of these: k stays free, the waiter keeps waiting (for l), and the
// notice is not passed on. A plain waiter of k in the same client —
// registered behind it, or registering just after the notice came (no
// recheck: the notice woke somebody, so heard is not raised) — is never
// woken: it sleeps until its timer though k is free. On a fake clock whose
// backoff never fires, forever; on a real clock, up to its backoff or the
// fallback poll (2 s).

// absorb is the setup the absorption tests share: n masters; a holder
// client holding k and l; a waiter client w in which a multi-key waiter on
// {k, l} waits and cannot win while l is held.
type absorb struct {
	rs    *realSet
	n     int
	w     *redlock.Client
	fake  *clock.Fake    // w's clock, whose backoff never fires; nil on a real clock
	k     *redlock.Lock  // the holder's lock on k
	multi *bgAcquisition // the multi-key waiter
	// settled counts the pauses w's waiters began after their latest
	// attempt (redlock.SetSettled).
	settled atomic.Int64
}

// startAbsorb sets up the absorption on n masters, w on a fake clock
// unless realClock, and returns once the multi-key waiter has subscribed
// k and l on every master (and, on a fake clock, waits on its timer).
func startAbsorb(t *testing.T, path connPath, n int, realClock bool) *absorb {
	t.Helper()
	a := &absorb{rs: startReal(t, n), n: n}
	if realClock {
		a.w = a.rs.client(t, path)
	} else {
		a.fake = clock.NewFake(time.Unix(1_700_000_000, 0))
		a.w = a.rs.client(t, path, redlock.WithClock(a.fake))
	}
	redlock.SetSettled(a.w, func() { a.settled.Add(1) })
	holder := a.rs.client(t, path)
	ctx := ctxT(t)
	var err error
	if a.k, err = holder.Acquire(ctx, "k", redlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Acquire(ctx, "l", redlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	a.multi = goAcquire(t, func(ctx context.Context) (*redlock.Lock, error) {
		return a.w.AcquireMulti(ctx, []string{"k", "l"}, redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour))
	})
	waitUntil(t, "the multi-key waiter subscribed k and l on every master", func() bool {
		for i := range a.rs.servers {
			if numSub(t, a.rs, i, "quorumlock:released:k") != 1 || numSub(t, a.rs, i, "quorumlock:released:l") != 1 {
				return false
			}
		}
		return a.fake == nil || a.fake.Pending() >= 1
	})
	return a
}

// plainWaiter starts the plain waiter of k in w, with opts.
func (a *absorb) plainWaiter(t *testing.T, opts ...redlock.LockOption) *bgAcquisition {
	return goAcquire(t, func(ctx context.Context) (*redlock.Lock, error) { return a.w.Acquire(ctx, "k", opts...) })
}

// releaseInWindow has k released in w's window: after the next waiter's
// refused attempt and before it registers (SetBeforeWait). It waits until
// every master ran the release and 300 ms more, in which the notices reach
// the multi-key waiter, whose retries fail on l and which waits again on
// its (fake) timer; then it runs then, if not nil.
func (a *absorb) releaseInWindow(t *testing.T, then func()) {
	var once sync.Once
	redlock.SetBeforeWait(a.w, func() {
		once.Do(func() {
			if err := a.k.Release(context.Background()); err != nil {
				t.Error(err)
			}
			waitUntil(t, "every master ran the release", func() bool { return a.rs.exists(t, "k") == 0 })
			time.Sleep(300 * time.Millisecond)
			if then != nil {
				then()
			}
		})
	})
}

// free reports on how many masters k is free.
func (a *absorb) free(t *testing.T) int { return a.n - a.rs.exists(t, "k") }

// bgAcquisition is an acquisition waiting in a goroutine of its own, for
// at most 30 s; it is stopped, if still waiting, when the test ends.
type bgAcquisition struct {
	cancel context.CancelFunc
	got    chan error    // nil once it got the lock and released it
	done   chan struct{} // closed when the goroutine ended
}

// goAcquire starts acquire in a goroutine of its own; what it gets is
// released at once.
func goAcquire(t *testing.T, acquire func(ctx context.Context) (*redlock.Lock, error)) *bgAcquisition {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	b := &bgAcquisition{cancel: cancel, got: make(chan error, 1), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		l, err := acquire(ctx)
		if err == nil {
			err = l.Release(context.Background())
		}
		b.got <- err
	}()
	t.Cleanup(b.stop)
	return b
}

// stop cancels the acquisition and waits for its goroutine to end.
func (b *bgAcquisition) stop() {
	b.cancel()
	<-b.done
}

// within reports whether the acquisition got its lock within d (and
// released it); it fails t if the acquisition failed. After d it stops
// the acquisition and reports false.
func (b *bgAcquisition) within(t *testing.T, d time.Duration) bool {
	t.Helper()
	select {
	case err := <-b.got:
		if err != nil {
			t.Fatal(err)
		}
		return true
	case <-time.After(d):
		b.stop()
		return false
	}
}

// TestWake_multiKeyWaiterAbsorbsNoticeRegistered: the plain
// waiter of k is registered behind the multi-key waiter before k's
// release. With one master (one notice per release) only the multi-key
// waiter is woken; it fails on l and keeps waiting; the plain waiter
// sleeps though k is free. With five masters the notice completing the
// quorum wakes the plain waiter (so N=5 holds).
func TestWake_multiKeyWaiterAbsorbsNoticeRegistered(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			a := startAbsorb(t, path, n, false)
			plain := a.plainWaiter(t, redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour))
			waitUntil(t, "the plain waiter waits too", func() bool { return a.fake.Pending() >= 2 })
			released := time.Now()
			if err := a.k.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !plain.within(t, 3*time.Second) {
				t.Fatalf("k was released and is free (on %d masters), but the plain waiter of k slept for 3 s: "+
					"the notice woke the multi-key waiter on {k, l}, which failed on l and did not pass it on", a.free(t))
			}
			t.Logf("plain waiter got k %v after its release", time.Since(released))
		})
	})
}

// TestWake_multiKeyWaiterAbsorbsNoticeInWindow: the release of
// k falls between the plain waiter's refused first attempt and its
// registration (the window of TestRelease_betweenRefusalAndSubscriptionIsHeard),
// while a multi-key waiter on {k, l} of the same client keeps k's channel
// live. Every notice of the release wakes the multi-key waiter (the only
// one registered), which fails on l; the plain waiter then registers
// "quiet" (its mark was live, no notice found the key without a waiter),
// so it does not try again, and sleeps though k is free. N=1 and N=5.
func TestWake_multiKeyWaiterAbsorbsNoticeInWindow(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			a := startAbsorb(t, path, n, false)
			a.releaseInWindow(t, nil)
			plain := a.plainWaiter(t, redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour))
			if !plain.within(t, 5*time.Second) {
				t.Fatalf("k was released in the window and is free (absent on %d of %d masters), but the plain waiter slept for 5 s",
					a.free(t), n)
			}
		})
	})
}

// TestWake_multiKeyAbsorbRealClock measures the cost on a real
// clock: the plain waiter (backoff 3 s, the only way a real-clock waiter
// is guaranteed to be asleep at the release; the default backoff grows to
// the fallback poll of up to 2 s for a TTL of 30 s) should get k within a
// small multiple of the round trip after its release, not at its next
// timer.
func TestWake_multiKeyAbsorbRealClock(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		a := startAbsorb(t, path, 1, true)
		// The plain waiter shares w's subscriptions (NUMSUB does not tell
		// when it registers): it has registered once it begins a pause
		// after its refused attempt (SetBeforeWait runs before it
		// registers).
		var registered atomic.Int64 // the count of settled pauses that shows it
		redlock.SetBeforeWait(a.w, func() { registered.Store(a.settled.Load() + 1) })
		plain := a.plainWaiter(t, redlock.WithTTL(30*time.Second), redlock.WithBackoff(3*time.Second, 3*time.Second))
		waitUntil(t, "the plain waiter was refused and waits", func() bool {
			n := registered.Load()
			return n > 0 && a.settled.Load() >= n
		})
		released := time.Now()
		if err := a.k.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !plain.within(t, 10*time.Second) {
			t.Fatal("the plain waiter did not get k within 10 s")
		}
		if d := time.Since(released); d > 500*time.Millisecond {
			t.Errorf("the plain waiter got k %v after its release, want < 500 ms (TTL 30 s): it was not woken", d)
		}
	})
}

// TestWake_wokenWaiterGivesUpInTheWindow: the "passes the
// wake-up on if it gives up" clause of the argument, in the window. The
// release of k comes between the plain waiter's refusal and its
// registration; its notices wake the multi-key waiter on {k, l} (the only
// waiter registered), which fails on l and then gives up, before the
// plain waiter registers. There is nobody to pass the notice on to, so
// the key just lingers; heard was not raised (the notice had woken
// somebody), so the plain waiter registers "quiet" and sleeps though k is
// free. (TestWake_wokenWaiterThatGivesUpPassesTheNoticeOn covers only a
// next waiter already registered.)
func TestWake_wokenWaiterGivesUpInTheWindow(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			a := startAbsorb(t, path, n, false)
			a.releaseInWindow(t, a.multi.stop) // the multi-key waiter, woken and failed on l, gives up
			plain := a.plainWaiter(t, redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour))
			if !plain.within(t, 5*time.Second) {
				t.Fatalf("k was released in the window and is free (absent on %d of %d masters), but the plain waiter slept for 5 s",
					a.free(t), n)
			}
		})
	})
}

// TestWake_readerBehindIntentAbsorbsNotice (held): the same
// absorption tried within one read-write key, one master. In the waiter
// client a writer waits (registered first) and then a reader, held back
// by the writer's intent; another client holds two read holds. Had the
// first reader's release been announced, it would have woken the writer
// (refused: one reader still in, sent to the back of the queue), and the
// last one the reader (refused on the intent, absorbing the notice). It
// holds because rw.lua announces a read release only when the last reader
// leaves: the one notice wakes the writer, which gets in.
func TestWake_readerBehindIntentAbsorbsNotice(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 1)
		ctx := ctxT(t)
		holder := rs.client(t, path)
		r1, err := holder.AcquireRead(ctx, "rw", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := holder.AcquireRead(ctx, "rw", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		fake := clock.NewFake(time.Unix(1_700_000_000, 0))
		w := rs.client(t, path, redlock.WithClock(fake))
		writer := goAcquire(t, func(ctx context.Context) (*redlock.Lock, error) {
			return w.AcquireWrite(ctx, "rw", redlock.WithTTL(time.Minute))
		})
		waitUntil(t, "the writer waits", func() bool { return fake.Pending() >= 1 })
		reader := goAcquire(t, func(ctx context.Context) (*redlock.Lock, error) {
			return w.AcquireRead(ctx, "rw", redlock.WithTTL(time.Minute))
		})
		waitUntil(t, "the reader waits", func() bool { return fake.Pending() >= 2 })
		if err := r1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the subject: a spell in which a notice of r1's release would wake the writer, refused (r2 is in)
		if err := r2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !writer.within(t, 3*time.Second) {
			t.Fatal("every reader left and the key is free for the writer, but the writer slept for 3 s: " +
				"the last release woke the reader held back by the writer's intent, which did not pass it on")
		}
		if !reader.within(t, 10*time.Second) {
			t.Fatal("the writer got the key and released it, but the reader did not get it within 10 s")
		}
	})
}
