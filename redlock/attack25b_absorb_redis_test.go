package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/redlock"
)

// attack25b: a woken waiter that neither takes the lock nor gives up
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

// absorbSetup holds k and l in a holder client, and starts, in the waiter
// client w (on fake, a fake clock), a multi-key waiter on {k, l} that
// cannot win while l is held. It returns the lock on k, and a stop func
// that ends the multi-key waiter.
func absorbSetup(t *testing.T, rs *realSet, path connPath, w *redlock.Client, fake *clock.Fake) (*redlock.Lock, func()) {
	t.Helper()
	holder := rs.client(t, path)
	ctx := ctxT(t)
	lk, err := holder.Acquire(ctx, "k", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Acquire(ctx, "l", redlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	doneA := make(chan struct{})
	go func() {
		defer close(doneA)
		l, err := w.AcquireMulti(ctxA, []string{"k", "l"}, redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour))
		if err == nil {
			_ = l.Release(context.Background())
		}
	}()
	waitUntil(t, "the multi-key waiter subscribed k and l on every master", func() bool {
		for i := range rs.servers {
			if numSub(t, rs, i, "quorumlock:released:k") != 1 || numSub(t, rs, i, "quorumlock:released:l") != 1 {
				return false
			}
		}
		return fake == nil || fake.Pending() >= 1
	})
	var stopOnce sync.Once
	return lk, func() { stopOnce.Do(func() { cancelA(); <-doneA }) }
}

// TestRedis_Attack25b_MultiKeyWaiterAbsorbsNotice_Registered: the plain
// waiter of k is registered behind the multi-key waiter before k's
// release. With one master (one notice per release) only the multi-key
// waiter is woken; it fails on l and keeps waiting; the plain waiter
// sleeps though k is free. With five masters the notice completing the
// quorum wakes the plain waiter (so N=5 holds).
func TestRedis_Attack25b_MultiKeyWaiterAbsorbsNotice_Registered(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			fake := clock.NewFake(time.Unix(1_700_000_000, 0))
			w := rs.client(t, path, redlock.WithClock(fake))
			lk, stopA := absorbSetup(t, rs, path, w, fake)
			defer stopA()
			ctxB, cancelB := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancelB()
			got := make(chan error, 1)
			go func() {
				l, err := w.Acquire(ctxB, "k", redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour))
				if err == nil {
					err = l.Release(context.Background())
				}
				got <- err
			}()
			waitUntil(t, "the plain waiter waits too", func() bool { return fake.Pending() >= 2 })
			released := time.Now()
			if err := lk.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("plain waiter got k %v after its release", time.Since(released))
			case <-time.After(3 * time.Second):
				cancelB()
				<-got
				t.Fatalf("k was released and is free (on %d masters), but the plain waiter of k slept for 3 s: "+
					"the notice woke the multi-key waiter on {k, l}, which failed on l and did not pass it on",
					n-rs.exists(t, "k"))
			}
		})
	})
}

// TestRedis_Attack25b_MultiKeyWaiterAbsorbsNotice_Window: the release of
// k falls between the plain waiter's refused first attempt and its
// registration (the window of TestRedis_ReleaseBetweenRefusalAndSubscriptionIsHeard),
// while a multi-key waiter on {k, l} of the same client keeps k's channel
// live. Every notice of the release wakes the multi-key waiter (the only
// one registered), which fails on l; the plain waiter then registers
// "quiet" (its mark was live, no notice found the key without a waiter),
// so it does not try again, and sleeps though k is free. N=1 and N=5.
func TestRedis_Attack25b_MultiKeyWaiterAbsorbsNotice_Window(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			fake := clock.NewFake(time.Unix(1_700_000_000, 0))
			w := rs.client(t, path, redlock.WithClock(fake))
			lk, stopA := absorbSetup(t, rs, path, w, fake)
			defer stopA()
			var once sync.Once
			redlock.SetBeforeWait(w, func() {
				once.Do(func() {
					if err := lk.Release(context.Background()); err != nil {
						t.Error(err)
					}
					waitUntil(t, "every master ran the release", func() bool { return rs.exists(t, "k") == 0 })
					// The notices reach the multi-key waiter, whose retries
					// fail on l; it waits again on its (fake) timer.
					time.Sleep(300 * time.Millisecond)
				})
			})
			ctxB, cancelB := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancelB()
			got := make(chan error, 1)
			go func() {
				l, err := w.Acquire(ctxB, "k", redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour))
				if err == nil {
					err = l.Release(context.Background())
				}
				got <- err
			}()
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				cancelB()
				<-got
				t.Fatalf("k was released in the window and is free (absent on %d of %d masters), but the plain waiter slept for 5 s",
					n-rs.exists(t, "k"), n)
			}
		})
	})
}

// TestRedis_Attack25b_MultiKeyAbsorbRealClock measures the cost on a real
// clock: the plain waiter (backoff 3 s, the only way a real-clock waiter
// is guaranteed to be asleep at the release; the default backoff grows to
// the fallback poll of up to 2 s for a TTL of 30 s) should get k within a
// small multiple of the round trip after its release, not at its next
// timer.
func TestRedis_Attack25b_MultiKeyAbsorbRealClock(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 1)
		w := rs.client(t, path)
		lk, stopA := absorbSetup(t, rs, path, w, nil)
		defer stopA()
		ctxB, cancelB := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancelB()
		got := make(chan error, 1)
		go func() {
			l, err := w.Acquire(ctxB, "k", redlock.WithTTL(30*time.Second), redlock.WithBackoff(3*time.Second, 3*time.Second))
			if err == nil {
				err = l.Release(context.Background())
			}
			got <- err
		}()
		// The plain waiter has registered when k has a second subscriber
		// in w... it shares w's connection: wait for its first refusal
		// instead, then a little for its registration.
		waitUntil(t, "the plain waiter was refused", func() bool {
			return cmdCalls(t, rs, 0, "set") >= 3 // holder's k, l and the plain waiter's SET
		})
		time.Sleep(100 * time.Millisecond)
		released := time.Now()
		if err := lk.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(released); d > 500*time.Millisecond {
				t.Errorf("the plain waiter got k %v after its release, want < 500 ms (TTL 30 s): it was not woken", d)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the plain waiter did not get k within 10 s")
		}
	})
}

// TestRedis_Attack25b_WokenWaiterGivesUpInTheWindow: the "passes the
// wake-up on if it gives up" clause of the argument, in the window. The
// release of k comes between the plain waiter's refusal and its
// registration; its notices wake the multi-key waiter on {k, l} (the only
// waiter registered), which fails on l and then gives up, before the
// plain waiter registers. There is nobody to pass the notice on to, so
// the key just lingers; heard was not raised (the notice had woken
// somebody), so the plain waiter registers "quiet" and sleeps though k is
// free. (TestRedis_WokenWaiterThatGivesUpPassesTheNoticeOn covers only a
// next waiter already registered.)
func TestRedis_Attack25b_WokenWaiterGivesUpInTheWindow(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			fake := clock.NewFake(time.Unix(1_700_000_000, 0))
			w := rs.client(t, path, redlock.WithClock(fake))
			lk, stopA := absorbSetup(t, rs, path, w, fake)
			defer stopA()
			var once sync.Once
			redlock.SetBeforeWait(w, func() {
				once.Do(func() {
					if err := lk.Release(context.Background()); err != nil {
						t.Error(err)
					}
					waitUntil(t, "every master ran the release", func() bool { return rs.exists(t, "k") == 0 })
					time.Sleep(300 * time.Millisecond) // the multi-key waiter is woken, fails on l
					stopA()                            // and gives up
				})
			})
			ctxB, cancelB := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancelB()
			got := make(chan error, 1)
			go func() {
				l, err := w.Acquire(ctxB, "k", redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour))
				if err == nil {
					err = l.Release(context.Background())
				}
				got <- err
			}()
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				cancelB()
				<-got
				t.Fatalf("k was released in the window and is free (absent on %d of %d masters), but the plain waiter slept for 5 s",
					n-rs.exists(t, "k"), n)
			}
		})
	})
}

// TestRedis_Attack25b_ReaderBehindIntentAbsorbsNotice (held): the same
// absorption tried within one read-write key, one master. In the waiter
// client a writer waits (registered first) and then a reader, held back
// by the writer's intent; another client holds two read holds. Had the
// first reader's release been announced, it would have woken the writer
// (refused: one reader still in, sent to the back of the queue), and the
// last one the reader (refused on the intent, absorbing the notice). It
// holds because rw.lua announces a read release only when the last reader
// leaves: the one notice wakes the writer, which gets in.
func TestRedis_Attack25b_ReaderBehindIntentAbsorbsNotice(t *testing.T) {
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
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		wrote := make(chan error, 1)
		go func() {
			l, err := w.AcquireWrite(wctx, "rw", redlock.WithTTL(time.Minute))
			if err == nil {
				err = l.Release(context.Background())
			}
			wrote <- err
		}()
		waitUntil(t, "the writer waits", func() bool { return fake.Pending() >= 1 })
		read := make(chan error, 1)
		go func() {
			l, err := w.AcquireRead(wctx, "rw", redlock.WithTTL(time.Minute))
			if err == nil {
				err = l.Release(context.Background())
			}
			read <- err
		}()
		waitUntil(t, "the reader waits", func() bool { return fake.Pending() >= 2 })
		if err := r1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the writer is woken and refused (r2 is in)
		if err := r2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-wrote:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(3 * time.Second):
			cancel()
			<-wrote
			<-read
			t.Fatal("every reader left and the key is free for the writer, but the writer slept for 3 s: " +
				"the last release woke the reader held back by the writer's intent, which did not pass it on")
		}
		if err := <-read; err != nil {
			t.Fatal(err)
		}
	})
}
