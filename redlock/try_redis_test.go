package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// One attempt for every kind (TryAcquire, TryAcquireRead, TryAcquireWrite,
// TryAcquireMulti, Reentrant.TryAcquire), and Acquire's wait, which has no
// bound but ctx unless WithWait gives one.

// tryFast checks that a Try call failed at once with ErrNotAcquired: no
// waiting, whatever the WithWait its options carry.
func tryFast(t *testing.T, what string, start time.Time, err error) {
	t.Helper()
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("%s: %v, want ErrNotAcquired", what, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("%s took %v: it waited", what, d)
	}
}

func TestTryAcquire_everyKindOnceLeavingNothing(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			c := rs.client(t, path)
			long := redlock.WithWait(time.Hour) // a Try call ignores it

			// Read-write: a reader holds; a writer's single attempt fails and
			// withdraws the intent it left, so new readers still enter.
			r1, err := c.TryAcquireRead(ctx, "doc", long)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = c.TryAcquireWrite(ctx, "doc", long)
			tryFast(t, "TryAcquireWrite while a reader holds", start, err)
			waitUntil(t, "the writer's intent withdrawn on every master", func() bool {
				return count(rs.hget(t, "doc", "intent"), "") == n
			})
			r2, err := c.TryAcquireRead(ctx, "doc")
			if err != nil {
				t.Fatalf("a reader after the writer gave up: %v", err)
			}
			for _, r := range []*redlock.Lock{r1, r2} {
				if err := r.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			w, err := c.TryAcquireWrite(ctx, "doc")
			if err != nil {
				t.Fatalf("TryAcquireWrite on a free key: %v", err)
			}
			start = time.Now()
			_, err = c.TryAcquireRead(ctx, "doc", long)
			tryFast(t, "TryAcquireRead while a writer holds", start, err)
			if err := w.Release(ctx); err != nil {
				t.Fatal(err)
			}

			// Multi-key: one key held; the attempt fails and sets none.
			held, err := c.TryAcquire(ctx, "{m}b")
			if err != nil {
				t.Fatal(err)
			}
			start = time.Now()
			_, err = c.TryAcquireMulti(ctx, []string{"{m}a", "{m}b"}, long)
			tryFast(t, "TryAcquireMulti with one key held", start, err)
			waitUntil(t, "no key of the failed attempt left", func() bool { return rs.exists(t, "{m}a") == 0 })
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			m, err := c.TryAcquireMulti(ctx, []string{"{m}a", "{m}b"})
			if err != nil {
				t.Fatalf("TryAcquireMulti on free keys: %v", err)
			}
			if err := m.Release(ctx); err != nil {
				t.Fatal(err)
			}

			// Reentrant: another owner fails at once; the owner enters again.
			a, err := c.NewReentrant("re", "owner-a", long)
			if err != nil {
				t.Fatal(err)
			}
			b, err := c.NewReentrant("re", "owner-b", long)
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 2; i++ {
				if err := a.TryAcquire(ctx); err != nil {
					t.Fatalf("owner-a, hold %d: %v", i, err)
				}
			}
			if a.Count() != 2 {
				t.Fatalf("owner-a's count %d, want 2", a.Count())
			}
			start = time.Now()
			tryFast(t, "another owner's TryAcquire", start, b.TryAcquire(ctx))
			for i := 0; i < 2; i++ {
				if err := a.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.TryAcquire(ctx); err != nil {
				t.Fatalf("owner-b once owner-a let go: %v", err)
			}
			if err := b.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// Acquire has no wait bound of its own: a waiter whose TTL is short gets a
// lock released long after that TTL, and one whose ctx ends stops then,
// with an error matching both ErrNotAcquired and ctx's.
func TestAcquire_waitsPastItsTTLUntilCtxEnds(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t.Cleanup(cancel) // after the parallel subtests
		c := rs.client(t, path, redlock.WithTimeout(200*time.Millisecond))
		const ttl = 600 * time.Millisecond
		long := redlock.WithTTL(10 * time.Second)
		type acquireFunc func(ctx context.Context, key string, opts ...redlock.LockOption) (func(context.Context) error, error)
		lock := func(f func(context.Context, string, ...redlock.LockOption) (*redlock.Lock, error)) acquireFunc {
			return func(ctx context.Context, key string, opts ...redlock.LockOption) (func(context.Context) error, error) {
				return releaser(f(ctx, key, opts...))
			}
		}
		reentrant := func(ctx context.Context, key string, opts ...redlock.LockOption) (func(context.Context) error, error) {
			r, err := c.NewReentrant(key, "", opts...)
			if err != nil {
				return nil, err
			}
			return r.Release, r.Acquire(ctx)
		}
		multi := func(ctx context.Context, key string, opts ...redlock.LockOption) (func(context.Context) error, error) {
			return releaser(c.AcquireMulti(ctx, []string{key}, opts...))
		}
		for _, tc := range []struct {
			name         string
			hold, waiter acquireFunc
		}{
			{"plain", lock(c.Acquire), lock(c.Acquire)},
			{"fair", lock(c.Acquire), func(ctx context.Context, key string, opts ...redlock.LockOption) (func(context.Context) error, error) {
				return releaser(c.Acquire(ctx, key, append(opts, redlock.WithFair())...))
			}},
			{"write", lock(c.AcquireRead), lock(c.AcquireWrite)},
			{"read", lock(c.AcquireWrite), lock(c.AcquireRead)},
			{"multi", lock(c.Acquire), multi},
			{"reentrant", reentrant, reentrant},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel() // a key of its own; the checks bound durations from below only
				key := "k:" + tc.name
				hold, err := tc.hold(ctx, key, long)
				if err != nil {
					t.Fatal(err)
				}
				// Bounded by ctx alone: it ends with ctx, past several TTLs.
				short, cancel := context.WithTimeout(ctx, 3*ttl)
				start := time.Now()
				_, err = tc.waiter(short, key, redlock.WithTTL(ttl))
				ended := short.Err()
				cancel()
				if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("waiter whose ctx ended: %v, want ErrNotAcquired and DeadlineExceeded", err)
				}
				if d := time.Since(start); d < 2*ttl || !errors.Is(ended, context.DeadlineExceeded) {
					t.Fatalf("the waiter gave up after %v, before its ctx ended (%v): %v", d, 3*ttl, err)
				}
				// Released after several of the waiter's TTLs: it still gets it.
				got := make(chan error, 1)
				go func() {
					rel, err := tc.waiter(ctx, key, redlock.WithTTL(ttl))
					if err == nil {
						_ = rel(context.Background()) // not what is tested
					}
					got <- err
				}()
				time.Sleep(2 * ttl) // the subject: twice the TTL passes while the call waits
				if err := hold(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-got; err != nil {
					t.Fatalf("waiter, released after %v: %v", 2*ttl, err)
				}
			})
		}
	})
}

// The calls on one Reentrant take turns without blocking anything else:
// while its first Acquire waits, Count and Lock answer, TryAcquire fails
// at once, and another Acquire or Release stops when its ctx ends.
func TestReentrant_callsWaitingForTheirTurnHonourCtx(t *testing.T) {
	rs := startReal(t, 1)
	ctx := ctxT(t)
	c := rs.client(t, pipelinedPath)
	holder, err := c.NewReentrant("k", "holder")
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReentrant("k", "waiter")
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { waited <- r.Acquire(wctx) }()
	waitUntil(t, "the waiter's first attempt refused", func() bool {
		return cmdCalls(t, rs, 0, "evalsha")+cmdCalls(t, rs, 0, "eval") >= 2
	})
	if r.Count() != 0 || r.Lock() != nil {
		t.Fatal("Count or Lock of a Reentrant not held")
	}
	start := time.Now()
	tryFast(t, "TryAcquire while the owner's Acquire waits", start, r.TryAcquire(ctx))
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = r.Acquire(short)
	cancel()
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire waiting for its turn: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	short, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
	err = r.Release(short)
	cancel()
	if !errors.Is(err, redlock.ErrNotReleased) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release waiting for its turn: %v, want ErrNotReleased and DeadlineExceeded", err)
	}
	stop()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiting Acquire: %v, want Canceled", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A reader turned away because a writer waits (not because one holds the
// lock) is told so: its error matches ErrWriterWaiting as well as
// ErrNotAcquired, names the masters (those that answered before the
// outcome was known), and does not say "held by another
// token"; a reader turned away by a writer that holds the lock is not.
func TestRW_readerTurnedAwayForAWaitingWriterIsToldSo(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		c := rs.client(t, path)
		r, err := c.TryAcquireRead(ctx, "doc")
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		waited := make(chan error, 1)
		go func() {
			_, err := c.AcquireWrite(wctx, "doc")
			waited <- err
		}()
		waitUntil(t, "the writer's intent on a quorum of masters", func() bool { return count(rs.hget(t, "doc", "intent"), "") <= 1 })
		_, err = c.TryAcquireRead(ctx, "doc")
		var qe *redlock.QuorumError
		if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, redlock.ErrWriterWaiting) || !errors.As(err, &qe) {
			t.Fatalf("reader behind a waiting writer: %v, want ErrNotAcquired and ErrWriterWaiting", err)
		}
		if len(qe.WriterWaiting) < 2 || strings.Contains(err.Error(), "held by another token") || !strings.Contains(err.Error(), "a writer is waiting") {
			t.Fatalf("reader behind a waiting writer: %q (WriterWaiting %v)", err, qe.WriterWaiting)
		}
		stop()
		if err := <-waited; !errors.Is(err, context.Canceled) {
			t.Fatalf("the writer: %v", err)
		}
		// The writer that gave up withdraws its intent in the background.
		waitUntil(t, "the writer's intent withdrawn", func() bool { return count(rs.hget(t, "doc", "intent"), "") == len(rs.servers) })
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w, err := c.TryAcquireWrite(ctx, "doc")
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.TryAcquireRead(ctx, "doc")
		if !errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, redlock.ErrWriterWaiting) || !strings.Contains(err.Error(), "held by another token") {
			t.Fatalf("reader while a writer holds: %v, want ErrNotAcquired alone, held by another token", err)
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
