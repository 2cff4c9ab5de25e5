package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// The wake-up path's life cycle.
// Waiters run on a fake clock whose backoff never fires unless said
// otherwise: only a release's notice (or a recheck) can get them the lock.

func newFake() *clock.Fake { return clock.NewFake(time.Unix(1_700_000_000, 0)) }

// awaitErr waits up to d for an error on ch.
func awaitErr(t *testing.T, ch <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("%s: nothing after %v", what, d)
		return nil
	}
}

// Close while waiters of every kind wait (on a fake clock: nothing but
// Close can end their wait) returns promptly, and every waiter returns an
// error matching ErrClosed.
func TestWake_closeEndsWaiters(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			holder := rs.client(t, path)
			for _, k := range []string{"k", "l"} {
				if _, err := holder.Acquire(ctx, k, redlock.WithTTL(time.Minute)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := holder.AcquireWrite(ctx, "rw", redlock.WithTTL(time.Minute)); err != nil {
				t.Fatal(err)
			}
			fake := newFake()
			w := rs.client(t, path, redlock.WithClock(fake))
			re, err := w.NewReentrant("k", "owner-w")
			if err != nil {
				t.Fatal(err)
			}
			calls := []func() error{
				func() error { _, err := w.Acquire(ctx, "k"); return err },
				func() error { _, err := w.AcquireMulti(ctx, []string{"k", "l"}); return err },
				func() error { _, err := w.AcquireRead(ctx, "rw"); return err },
				func() error { _, err := w.AcquireWrite(ctx, "rw"); return err },
				func() error { _, err := w.Acquire(ctx, "l", redlock.WithFair()); return err },
				func() error { return re.Acquire(ctx) },
			}
			errs := make(chan error, len(calls))
			for _, f := range calls {
				go func() { errs <- f() }()
			}
			waitUntil(t, "every waiter waits", func() bool { return fake.Pending() >= len(calls) })
			closed := make(chan error, 1)
			start := time.Now()
			go func() { closed <- w.Close() }()
			if err := awaitErr(t, closed, 5*time.Second, "Close"); err != nil {
				t.Fatal(err)
			}
			for range calls {
				err := awaitErr(t, errs, 5*time.Second, "a waiter after Close")
				if !errors.Is(err, redlock.ErrClosed) {
					t.Errorf("waiter after Close: %v, want ErrClosed", err)
				}
			}
			t.Logf("Close and its waiters returned in %v", time.Since(start))
		})
	})
}

// After the last waiter leaves, its keys' channels linger about a second,
// then are unsubscribed on every master (PUBSUB NUMSUB 0), and after Close
// no goroutine of the client is left.
func TestWake_lingerExpiresAndNothingLeaks(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 5)
		ctx := ctxT(t)
		holder := rs.client(t, path)
		const keys = 10
		for i := 0; i < keys; i++ {
			if _, err := holder.Acquire(ctx, fmt.Sprintf("k%d", i), redlock.WithTTL(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		c, err := redigo.New(rs.pools, testOptions(path, []redlock.Option{redlock.WithClock(newFake())})...)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i := 0; i < keys; i++ {
			for j := 0; j < 3; j++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _ = c.Acquire(wctx, fmt.Sprintf("k%d", i), redlock.WithWait(time.Hour))
				}()
			}
		}
		allSub := func(want int) func() bool {
			return func() bool {
				for m := range rs.servers {
					for i := 0; i < keys; i++ {
						if numSub(t, rs, m, fmt.Sprintf("quorumlock:released:k%d", i)) != want {
							return false
						}
					}
				}
				return true
			}
		}
		waitUntil(t, "every key subscribed on every master", allSub(1))
		// The waiters leave from the cancel on: a key's linger counts
		// from then at the earliest.
		cancelled := time.Now()
		cancel()
		wg.Wait()
		left := time.Now()
		if _, waited, _ := c.Sizes(); waited != 0 {
			t.Errorf("%d keys still have waiters", waited)
		}
		if l := redlock.Lingering(c); l != keys {
			t.Errorf("%d keys linger, want %d", l, keys)
		}
		time.Sleep(time.Until(cancelled.Add(500 * time.Millisecond))) // the subject: nothing unsubscribes within 0.5 s (linger 1 s)
		// A check that ends a linger after the cancel proves nothing (a
		// loaded machine can take that long over the waiters' leaving
		// and the 60 NUMSUBs).
		if kept := allSub(1)(); !kept && time.Since(cancelled) < time.Second {
			t.Errorf("a key was unsubscribed within %v of its last waiter leaving (linger 1 s)", time.Since(cancelled).Round(time.Millisecond))
		} else if !kept {
			t.Logf("not judged whether the keys linger: checked %v after the cancel", time.Since(cancelled).Round(time.Millisecond))
		}
		waitUntil(t, "every key unsubscribed on every master", allSub(0))
		if d := time.Since(left); d > 3*time.Second {
			t.Errorf("the keys were unsubscribed %v after their last waiter left, want about 1 s", d)
		}
		if l := redlock.Lingering(c); l != 0 {
			t.Errorf("%d keys linger after expiry", l)
		}
		c.Close()
	})
}

// A master restarted (its subscription broken, the key kept: AOF) while a
// waiter waits: once the subscriber is revived, a release wakes the waiter
// within a small multiple of the round trip (TTL 30 s, real clock).
func TestWake_masterRestartThenReleaseWakes(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n, redistest.WithAOF())
			ctx := ctxT(t)
			holder := rs.client(t, path)
			l, err := holder.Acquire(ctx, "k", redlock.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			rs.holdEverywhere(t, "k", l, 30*time.Second) // the restart keeps it on master 0
			w := rs.client(t, path)
			got := make(chan error, 1)
			var gotAt time.Time
			go func() {
				l, err := w.Acquire(ctx, "k", redlock.WithTTL(30*time.Second))
				gotAt = time.Now()
				if err == nil {
					err = l.Release(context.Background())
				}
				got <- err
			}()
			chk := func(want int) func() bool {
				return func() bool {
					for i := range rs.servers {
						if numSub(t, rs, i, "quorumlock:released:k") != want {
							return false
						}
					}
					return true
				}
			}
			waitUntil(t, "the waiter subscribed on every master", chk(1))
			// SIGTERM writes the AOF: the key survives the restart.
			victim := rs.servers[0]
			if err := victim.Stop(); err != nil {
				t.Fatal(err)
			}
			if err := victim.Start(); err != nil {
				t.Fatal(err)
			}
			if vals := rs.values(t, "k"); vals[0] == "" {
				t.Fatalf("the key did not survive the restart: %q", vals)
			}
			waitUntil(t, "the waiter's subscriber revived on the restarted master", chk(1))
			time.Sleep(1200 * time.Millisecond) // the subject: the waiter's backoff (at most 250 ms) runs out: it is on its fallback poll again
			released := time.Now()
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := awaitErr(t, got, 10*time.Second, "the waiter"); err != nil {
				t.Fatal(err)
			}
			if d := gotAt.Sub(released); d > 500*time.Millisecond {
				t.Errorf("the waiter got the key %v after its release, want < 500 ms", d)
			}
		})
	})
}

// The 257th lingering key evicts the one idle longest while a waiter
// depends on it: the waiter read its mark (the key lingering, live),
// was refused; then 256 other keys start to linger, the key is
// unsubscribed, and the release of the key comes (unheard). The waiter
// registers on a new entry, so it tries again once subscribed.
func TestWake_evictionInTheWindow(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 1)
		ctx := ctxT(t)
		holder := rs.client(t, path)
		fake := newFake()
		w := rs.client(t, path, redlock.WithClock(fake))
		lk, err := holder.Acquire(ctx, "k", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		const others = redlock.MaxLinger
		for i := 0; i < others; i++ {
			if _, err := holder.Acquire(ctx, fmt.Sprintf("o%d", i), redlock.WithTTL(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		// 256 waiters on other keys wait in w.
		octx, ocancel := context.WithCancel(ctx)
		defer ocancel()
		var owg sync.WaitGroup
		for i := 0; i < others; i++ {
			owg.Add(1)
			go func() {
				defer owg.Done()
				_, _ = w.Acquire(octx, fmt.Sprintf("o%d", i))
			}()
		}
		waitUntil(t, "the other waiters wait", func() bool { _, n, _ := w.Sizes(); return n == others && fake.Pending() >= others })
		// k lingers, live: an earlier waiter of k left.
		actx, acancel := context.WithCancel(ctx)
		adone := make(chan struct{})
		go func() { defer close(adone); _, _ = w.Acquire(actx, "k") }()
		waitUntil(t, "k's waiter subscribed", func() bool {
			return numSub(t, rs, 0, "quorumlock:released:k") == 1 && fake.Pending() >= others+1
		})
		acancel()
		<-adone
		idle := time.Now()
		var once sync.Once
		redlock.SetBeforeWait(w, func() {
			once.Do(func() {
				ocancel() // 256 more keys linger: k, idle longest, is evicted
				owg.Wait()
				waitUntil(t, "k unsubscribed", func() bool { return numSub(t, rs, 0, "quorumlock:released:k") == 0 })
				if time.Since(idle) > 900*time.Millisecond {
					t.Logf("k may have expired rather than been evicted (%v after it began to linger)", time.Since(idle))
				}
				if err := lk.Release(context.Background()); err != nil {
					t.Error(err)
				}
			})
		})
		got := make(chan error, 1)
		go func() {
			l, err := w.Acquire(ctx, "k", redlock.WithTTL(time.Minute))
			if err == nil {
				err = l.Release(context.Background())
			}
			got <- err
		}()
		if err := awaitErr(t, got, 5*time.Second, "the waiter of the evicted key"); err != nil {
			t.Fatal(err)
		}
		if n := redlock.Lingering(w); n > redlock.MaxLinger {
			t.Errorf("%d keys linger, at most %d", n, redlock.MaxLinger)
		}
	})
}

// A writer's release wakes every reader waiting in one client: each reader
// that gets in passes the wake-up on (readers share the lock).
func TestWake_writerReleaseWakesAllReaders(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			holder := rs.client(t, path)
			wl, err := holder.AcquireWrite(ctx, "rw", redlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			fake := newFake()
			w := rs.client(t, path, redlock.WithClock(fake))
			const readers = 6
			got := make(chan error, readers)
			locks := make(chan *redlock.Lock, readers)
			for i := 0; i < readers; i++ {
				go func() {
					l, err := w.AcquireRead(ctx, "rw", redlock.WithTTL(time.Minute))
					if err == nil {
						locks <- l
					}
					got <- err
				}()
			}
			waitUntil(t, "the readers wait", func() bool { return fake.Pending() >= readers })
			if err := wl.Release(ctx); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < readers; i++ {
				if err := awaitErr(t, got, 5*time.Second, fmt.Sprintf("reader %d of %d", i+1, readers)); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < readers; i++ {
				_ = (<-locks).Release(ctx)
			}
		})
	})
}

// A waiting writer in the waiter client is woken by the last reader's
// release, and the readers queued behind its intent in the same client
// are woken by its release in turn.
func TestWake_readersAfterWriterAfterReaders(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
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
			fake := newFake()
			w := rs.client(t, path, redlock.WithClock(fake))
			wrote := make(chan error, 1)
			go func() {
				l, err := w.AcquireWrite(ctx, "rw", redlock.WithTTL(time.Minute))
				if err == nil {
					time.Sleep(50 * time.Millisecond) // the subject: a hold
					err = l.Release(context.Background())
				}
				wrote <- err
			}()
			waitUntil(t, "the writer waits", func() bool { return fake.Pending() >= 1 })
			const readers = 3
			read := make(chan error, readers)
			for i := 0; i < readers; i++ {
				go func() {
					l, err := w.AcquireRead(ctx, "rw", redlock.WithTTL(time.Minute))
					if err == nil {
						err = l.Release(context.Background())
					}
					read <- err
				}()
			}
			waitUntil(t, "the readers wait behind the writer's intent", func() bool { return fake.Pending() >= 1+readers })
			if err := r1.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r2.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := awaitErr(t, wrote, 5*time.Second, "the writer"); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < readers; i++ {
				if err := awaitErr(t, read, 5*time.Second, "a reader after the writer"); err != nil {
					t.Fatal(err)
				}
			}
		})
	})
}

// A reentrant owner's partial releases announce nothing; its last release
// wakes another owner waiting.
func TestWake_reentrantLastReleaseWakes(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			a, err := rs.client(t, path).NewReentrant("k", "owner-a", redlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				if err := a.Acquire(ctx); err != nil {
					t.Fatal(err)
				}
			}
			fake := newFake()
			w := rs.client(t, path, redlock.WithClock(fake))
			b, err := w.NewReentrant("k", "owner-b", redlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				err := b.Acquire(ctx)
				if err == nil {
					err = b.Release(context.Background())
				}
				got <- err
			}()
			waitUntil(t, "owner b waits", func() bool {
				return numSub(t, rs, 0, "quorumlock:released:k") == 1 && fake.Pending() >= 1
			})
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				t.Fatalf("owner b returned (%v) while owner a still holds once", err)
			case <-time.After(200 * time.Millisecond):
			}
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := awaitErr(t, got, 5*time.Second, "owner b after a's last release"); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// A waiter whose ctx ends exactly as the release's notice arrives: either
// it takes the lock, or the next waiter of the key in the client gets it
// within a small multiple of the round trip (TTL 30 s, both waiters on
// their fallback poll of 1-2 s before the release).
//
// On a fake clock this fails now and then (pooled, N=1): the first waiter
// is woken, its attempt's SET lands, its ctx ends before the reply, and
// it rolls the SET back — unannounced, as every rollback is — after it
// passed the notice on; the second waiter, woken, is refused by that SET.
// On a real clock its backoff starts over at the minimum after a wake-up
// (as designed: "the timer is the backoff while the backoff climbs"), so
// it finds the key freed by the rollback at once; this test checks that.
func TestWake_cancelAsNoticeArrives(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			holder := rs.client(t, path)
			w := rs.client(t, path)
			var settled atomic.Int64 // pauses begun by w's waiters after their latest attempt
			redlock.SetSettled(w, func() { settled.Add(1) })
			const ttl = 30 * time.Second
			for round := 0; round < 3; round++ {
				ctx := ctxT(t)
				before := settled.Load()
				lk, err := holder.Acquire(ctx, "k", redlock.WithTTL(ttl))
				if err != nil {
					t.Fatal(err)
				}
				actx, acancel := context.WithCancel(ctx)
				type res struct {
					l   *redlock.Lock
					err error
					at  time.Time
				}
				ra, rb := make(chan res, 1), make(chan res, 1)
				go func() { l, err := w.Acquire(actx, "k", redlock.WithTTL(ttl)); ra <- res{l, err, time.Now()} }()
				time.Sleep(20 * time.Millisecond) // the subject: a waits before b arrives
				go func() { l, err := w.Acquire(ctx, "k", redlock.WithTTL(ttl)); rb <- res{l, err, time.Now()} }()
				// Both on the fallback poll: each began a pause with its
				// latest attempt over and its backoff timer set
				// (redlock.SetSettled), w subscribed on every master; or
				// one returned, which the checks below report.
				waitUntil(t, "a and b on the fallback poll", func() bool {
					if len(ra) > 0 || len(rb) > 0 {
						return true
					}
					for i := range rs.servers {
						if numSub(t, rs, i, "quorumlock:released:k") < 1 {
							return false
						}
					}
					return settled.Load()-before >= 2
				})
				go func() {
					time.Sleep(time.Duration(round) * 150 * time.Microsecond) // the subject: the cancel lands at a different moment each round
					acancel()
				}()
				released := time.Now()
				if err := lk.Release(ctx); err != nil {
					t.Fatal(err)
				}
				var a res
				select {
				case a = <-ra:
				case <-time.After(5 * time.Second):
					t.Fatal("a did not return")
				}
				if a.err == nil {
					if d := a.at.Sub(released); d > 500*time.Millisecond {
						t.Errorf("round %d: a got k %v after its release", round, d)
					}
					_ = a.l.Release(ctx)
				}
				select {
				case b := <-rb:
					if b.err != nil {
						t.Fatalf("round %d: b: %v", round, b.err)
					}
					if d := b.at.Sub(released); a.err != nil && d > 500*time.Millisecond {
						t.Errorf("round %d: a gave up (%v); b got k %v after its release, want < 500 ms", round, a.err, d)
					}
					_ = b.l.Release(ctx)
				case <-time.After(5 * time.Second):
					t.Fatalf("round %d: a returned (%v) and k is free, but b slept", round, a.err)
				}
				acancel()
			}
		})
	})
}

// Close while waiters wait and one master is frozen (SIGSTOP: its
// subscriber's SUBSCRIBE is never acknowledged, the waiters' attempts time
// out there) returns within a few per-master timeouts, and the waiters
// return errors matching ErrClosed.
func TestWake_closeWithFrozenMasterEndsWaiters(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		holder := rs.client(t, path)
		if _, err := holder.Acquire(ctx, "k", redlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := rs.servers[0].Pause(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = rs.servers[0].Resume() }()
		fake := newFake()
		w := rs.client(t, path, redlock.WithClock(fake))
		const waiters = 4
		errs := make(chan error, waiters)
		for i := 0; i < waiters; i++ {
			go func() {
				_, err := w.Acquire(ctx, "k", redlock.WithTTL(time.Minute))
				errs <- err
			}()
		}
		// Each waiter, its first attempt failed (master 0 timed out), waits
		// on its timer or polls for its subscription's acknowledgement.
		time.Sleep(2 * realTimeout) // the subject: each waiter's first attempt times out (2 timeouts)
		closed := make(chan error, 1)
		start := time.Now()
		go func() { closed <- w.Close() }()
		if err := awaitErr(t, closed, 4*realTimeout+2*time.Second, "Close with a frozen master"); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < waiters; i++ {
			if err := awaitErr(t, errs, 5*time.Second, "a waiter after Close"); !errors.Is(err, redlock.ErrClosed) {
				t.Errorf("waiter after Close: %v, want ErrClosed", err)
			}
		}
		t.Logf("Close and its waiters returned in %v", time.Since(start))
	})
}

// A multi-key waiter on five keys held by five locks (one of them a
// multi-key lock on two) is woken by each release in turn and gets its
// keys at the last one, on a fake clock: every release's notice reaches
// it, including the ones that come while it is making an attempt.
func TestWake_multiKeyWaiterWokenByLastOfManyReleases(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			holder := rs.client(t, path)
			var locks []*redlock.Lock
			for _, k := range []string{"a", "b", "c"} {
				l, err := holder.Acquire(ctx, k, redlock.WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				locks = append(locks, l)
			}
			l, err := holder.AcquireMulti(ctx, []string{"d", "e"}, redlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, l)
			fake := newFake()
			w := rs.client(t, path, redlock.WithClock(fake))
			got := make(chan error, 1)
			go func() {
				l, err := w.AcquireMulti(ctx, []string{"e", "d", "c", "b", "a"}, redlock.WithTTL(time.Minute))
				if err == nil {
					err = l.Release(context.Background())
				}
				got <- err
			}()
			waitUntil(t, "the waiter subscribed", func() bool {
				for i := range rs.servers {
					for _, k := range []string{"a", "b", "c", "d", "e"} {
						if numSub(t, rs, i, "quorumlock:released:"+k) != 1 {
							return false
						}
					}
				}
				return fake.Pending() >= 1
			})
			for i, l := range locks {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if i < len(locks)-1 {
					select {
					case err := <-got:
						t.Fatalf("the waiter returned (%v) with %d locks still held", err, len(locks)-1-i)
					case <-time.After(time.Duration(i%2) * 5 * time.Millisecond):
					}
				}
			}
			if err := awaitErr(t, got, 5*time.Second, "the multi-key waiter after the last release"); err != nil {
				t.Fatal(err)
			}
		})
	})
}
