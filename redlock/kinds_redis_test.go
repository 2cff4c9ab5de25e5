package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/redlock"
)

// Reentrant, read-write and multi-key locks against real masters.

// expectWake starts acquire on a client whose backoff never fires (a
// pauseClock), waits until it has subscribed to every key's channel on
// every master and its latest attempt is over, runs release, and checks
// that acquire then succeeds (and releases what it got): only the
// release's notice can have woken it.
func expectWake(t *testing.T, path connPath, rs *realSet, keys []string,
	acquire func(c *redlock.Client) (release func(context.Context) error, err error), release func(context.Context) error) {
	t.Helper()
	pc := newPauseClock()
	expectWakeOn(t, rs, rs.client(t, path, redlock.WithClock(pc)), pc, keys, acquire, release)
}

// expectWakeOn is expectWake with the waiter's client c, on clock pc; no
// other waiter of c may run meanwhile.
//
// The release is made once the waiter pauses with no re-check pending
// (redlock.SetSettled): an attempt still under way could meet the release
// at the masters and get the lock unwoken, or leave a grant of its own,
// rolled back unannounced, that the woken attempt meets. A pause begun
// after the release, with no timer fired, follows an attempt a notice
// began. That attempt can fail with no notice left to come (a master past
// its deadline on a loaded machine, a notice lost with a subscriber's
// connection): then the waiter's backoff is what retries, and the test
// fires it, as time passing would.
func expectWakeOn(t *testing.T, rs *realSet, c *redlock.Client, pc *pauseClock, keys []string,
	acquire func(c *redlock.Client) (release func(context.Context) error, err error), release func(context.Context) error) {
	t.Helper()
	redlock.SetSettled(c, pc.settle)
	got := make(chan error, 1)
	go func() {
		rel, err := acquire(c)
		if err == nil {
			err = rel(context.Background())
		}
		got <- err
	}()
	waitUntil(t, "the waiter subscribed on every master, its latest attempt over", func() bool {
		for i := range rs.servers {
			for _, k := range keys {
				if numSub(t, rs, i, "quorumlock:released:"+k) != 1 {
					return false
				}
			}
		}
		return pc.paused() >= 1
	})
	seen := pc.paused()
	if err := release(context.Background()); err != nil {
		t.Fatal(err)
	}
	woken := false
	bound := time.NewTimer(10 * time.Second)
	defer bound.Stop()
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-poll.C:
			if n := pc.paused(); n > seen {
				if !woken {
					t.Logf("a woken attempt failed: the test fires the waiter's backoff")
				}
				woken, seen = true, n
				pc.fire()
			}
		case <-bound.C:
			if woken {
				t.Fatal("the waiter, woken by the release, did not get the lock")
			}
			t.Fatal("the release did not wake the waiter")
		}
	}
}

// pauseClock is the clock of a waiter whose timers fire only when the
// test fires its backoff: it tells the time of a fake clock that is never
// moved, and fire fires the timers made up to the start of the waiter's
// latest pause (settle, hooked with redlock.SetSettled), among them that
// pause's. A timer made since (a per-master timer of a round the waiter
// began, woken meanwhile) does not fire, and one stopped does nothing.
type pauseClock struct {
	*clock.Fake // Now and Since

	mu     sync.Mutex
	timers []*pauseTimer // made and neither stopped nor fired
	made   int           // timers made
	mark   int           // timers made by the start of the latest pause
	pauses int           // pauses begun
}

func newPauseClock() *pauseClock {
	return &pauseClock{Fake: clock.NewFake(time.Unix(1_700_000_000, 0))}
}

type pauseTimer struct {
	pc *pauseClock
	n  int // its place in the order made
	c  chan time.Time
}

func (pc *pauseClock) NewTimer(d time.Duration) clock.Timer {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.made++
	t := &pauseTimer{pc: pc, n: pc.made, c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- pc.Now()
	} else {
		pc.timers = append(pc.timers, t)
	}
	return t
}

func (t *pauseTimer) C() <-chan time.Time { return t.c }

func (t *pauseTimer) Stop() bool {
	pc := t.pc
	pc.mu.Lock()
	defer pc.mu.Unlock()
	n := len(pc.timers)
	pc.timers = slices.DeleteFunc(pc.timers, func(x *pauseTimer) bool { return x == t })
	return len(pc.timers) < n
}

// settle records that the waiter began a pause.
func (pc *pauseClock) settle() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.pauses++
	pc.mark = pc.made
}

// paused returns how many pauses the waiter began.
func (pc *pauseClock) paused() int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.pauses
}

// fire fires the timers made by the start of the latest pause.
func (pc *pauseClock) fire() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	now := pc.Now()
	pc.timers = slices.DeleteFunc(pc.timers, func(t *pauseTimer) bool {
		if t.n > pc.mark {
			return false
		}
		t.c <- now
		return true
	})
}

// releaser adapts an acquisition's result for expectWake.
func releaser(l *redlock.Lock, err error) (func(context.Context) error, error) {
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// hget returns field of hash key on every master.
func (rs *realSet) hget(t *testing.T, key, field string) []string {
	t.Helper()
	vals := make([]string, len(rs.servers))
	for i, s := range rs.servers {
		v, err := redis.String(s.Do("HGET", key, field))
		if err != nil && !errors.Is(err, redis.ErrNil) {
			t.Fatal(err)
		}
		vals[i] = v
	}
	return vals
}

func (rs *realSet) exists(t *testing.T, key string) int {
	t.Helper()
	n := 0
	for _, s := range rs.servers {
		if e, _ := redis.Int(s.Do("EXISTS", key)); e == 1 {
			n++
		}
	}
	return n
}

func TestReentrant_seedTranscript(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			a, err := rs.client(t, path).NewReentrant("lock", "owner-1")
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 3; i++ {
				if err := a.Acquire(ctx); err != nil {
					t.Fatalf("hold %d: %v", i, err)
				}
			}
			if a.Count() != 3 {
				t.Fatalf("after three holds: count %d", a.Count())
			}
			// A quorum answered each call; the others follow.
			waitUntil(t, "count 3 on every master", func() bool { return count(rs.hget(t, "lock", "owner-1"), "3") == n })
			// Another owner is refused and its release changes nothing.
			b, err := rs.client(t, path).NewReentrant("lock", "owner-2", redlock.WithWait(0))
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Acquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("another owner: %v, want ErrNotAcquired", err)
			}
			if err := b.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
				t.Fatalf("another owner's release: %v, want ErrNotHeld", err)
			}
			if count(rs.hget(t, "lock", "owner-1"), "3") != n || count(rs.hget(t, "lock", "owner-2"), "") != n {
				t.Fatalf("the foreign owner changed the masters: %v", rs.hget(t, "lock", "owner-1"))
			}
			for want := 2; want >= 1; want-- {
				if err := a.Release(ctx); err != nil {
					t.Fatal(err)
				}
				waitUntil(t, fmt.Sprintf("count %d on every master", want), func() bool {
					return count(rs.hget(t, "lock", "owner-1"), fmt.Sprint(want)) == n
				})
			}
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if a.Count() != 0 {
				t.Fatal("the third release left a count")
			}
			waitUntil(t, "the third release deleted the lock", func() bool { return rs.exists(t, "lock") == 0 })
			if err := a.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
				t.Fatalf("a fourth release: %v, want ErrNotHeld", err)
			}
		})
	})
}

func TestReentrant_masterThatMissedAnUpdate(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 5)
		ctx := ctxT(t)
		a, err := rs.client(t, path).NewReentrant("lock", "owner-1")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		// Master 4 misses the second hold.
		if err := rs.servers[4].Pause(); err != nil {
			t.Fatal(err)
		}
		err = a.Acquire(ctx)
		if rerr := rs.servers[4].Resume(); rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "master 4 ran the late command", func() bool {
			return rs.hget(t, "lock", "owner-1")[4] != ""
		})
		// The third hold sets the count everywhere, whatever master 4 saw.
		if err := a.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "every master has count 3", func() bool { return count(rs.hget(t, "lock", "owner-1"), "3") == 5 })
		for i := 0; i < 3; i++ {
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		waitUntil(t, "the lock is gone everywhere", func() bool { return rs.exists(t, "lock") == 0 })
	})
}

func TestReentrant_failedFirstHoldLeavesNothing(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 5)
		ctx := ctxT(t)
		// Another owner holds the lock on three masters.
		for _, s := range rs.servers[:3] {
			if _, err := s.Do("HSET", "lock", "other", 1); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Do("PEXPIRE", "lock", 60000); err != nil {
				t.Fatal(err)
			}
		}
		a, err := rs.client(t, path).NewReentrant("lock", "owner-1", redlock.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Acquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("err = %v, want ErrNotAcquired", err)
		}
		waitUntil(t, "the rollback removed the owner everywhere", func() bool {
			return count(rs.hget(t, "lock", "owner-1"), "") == 5
		})
		if a.Count() != 0 {
			t.Fatalf("count %d after a failed hold", a.Count())
		}
	})
}

func TestReentrant_lastReleaseWakesWaiter(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			a, err := rs.client(t, path).NewReentrant("lock", "owner-1")
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				if err := a.Acquire(ctx); err != nil {
					t.Fatal(err)
				}
			}
			expectWake(t, path, rs, []string{"lock"}, func(c *redlock.Client) (func(context.Context) error, error) {
				b, err := c.NewReentrant("lock", "owner-2", redlock.WithWait(time.Hour))
				if err != nil {
					return nil, err
				}
				return b.Release, b.Acquire(ctx)
			}, func(ctx context.Context) error {
				// The first release only counts down: the waiter sleeps on.
				if err := a.Release(ctx); err != nil {
					return err
				}
				return a.Release(ctx)
			})
		})
	})
}

func TestReentrant_lostLockStartsOver(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 1)
		ctx := ctxT(t)
		a, err := rs.client(t, path).NewReentrant("lock", "owner-1", redlock.WithTTL(600*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		until := a.Lock().Until()
		time.Sleep(time.Until(until) + 50*time.Millisecond) // the subject: the hold's validity runs out
		// Taking it again finds the validity gone: the hold is lost, and the
		// owner starts over with a first hold.
		if err := a.Acquire(ctx); !errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("err = %v, want ErrLockLost", err)
		}
		if err := a.Acquire(ctx); err != nil || a.Count() != 1 {
			t.Fatalf("starting over: %v, count %d", err, a.Count())
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRW_manyReadersOrOneWriter(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			var readers []*redlock.Lock
			for i := 0; i < 3; i++ {
				r, err := rs.client(t, path).AcquireRead(ctx, "doc")
				if err != nil {
					t.Fatalf("reader %d: %v", i, err)
				}
				readers = append(readers, r)
			}
			w := rs.client(t, path)
			if _, err := w.AcquireWrite(ctx, "doc", redlock.WithWait(0)); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("writer beside readers: %v", err)
			}
			for _, r := range readers {
				if err := r.Extend(ctx, 20*time.Second); err != nil {
					t.Fatalf("reader extend: %v", err)
				}
				if err := r.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// The writer's refused attempt left an intent, withdrawn in
			// the background once it gave up (a leave, sent after that
			// attempt's command on each master but not before the next
			// call's): on the pooled path this call's attempt may reach
			// the master first and meet it, so it waits.
			wl, err := w.AcquireWrite(ctx, "doc", redlock.WithWait(10*time.Second))
			if err != nil {
				t.Fatalf("writer after the readers left: %v", err)
			}
			if _, err := rs.client(t, path).AcquireRead(ctx, "doc", redlock.WithWait(0)); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("reader beside the writer: %v", err)
			}
			if _, err := rs.client(t, path).AcquireWrite(ctx, "doc", redlock.WithWait(0)); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("second writer: %v", err)
			}
			if err := wl.Extend(ctx, 20*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := wl.Release(ctx); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "the hash is gone", func() bool { return rs.exists(t, "doc") == 0 })
		})
	})
}

func TestRW_writerIsNotStarvedByReaders(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			r1, err := rs.client(t, path).AcquireRead(ctx, "doc")
			if err != nil {
				t.Fatal(err)
			}
			w := rs.client(t, path)
			wrote := make(chan *redlock.Lock, 1)
			go func() {
				l, err := w.AcquireWrite(ctx, "doc", redlock.WithWait(time.Minute))
				if err != nil {
					t.Error(err)
				}
				wrote <- l
			}()
			// The writer's intent is on the masters: new readers wait.
			waitUntil(t, "the writer's intent is set", func() bool {
				return count(rs.hget(t, "doc", "intent"), "") <= n-(n/2+1)
			})
			r2c := rs.client(t, path)
			if _, err := r2c.AcquireRead(ctx, "doc", redlock.WithWait(0)); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("a new reader got past the waiting writer: %v", err)
			}
			if err := r1.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wl := <-wrote
			if wl == nil {
				t.FailNow()
			}
			if err := wl.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r2, err := r2c.AcquireRead(ctx, "doc", redlock.WithWait(0))
			if err != nil {
				t.Fatalf("reader after the writer: %v", err)
			}
			_ = r2.Release(ctx)
		})
	})
}

func TestRW_crashedReaderAndVanishedWriterAreBounded(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		// A reader that never releases (its process died) blocks the writer
		// only until its TTL.
		if _, err := rs.client(t, path).AcquireRead(ctx, "doc", redlock.WithTTL(time.Second)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		wl, err := rs.client(t, path).AcquireWrite(ctx, "doc", redlock.WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("writer behind a crashed reader: %v (after %v)", err, time.Since(start))
		}
		if err := wl.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// A writer that gives up takes its intent back; one that vanished
		// leaves an intent that expires.
		r, err := rs.client(t, path).AcquireRead(ctx, "doc")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rs.client(t, path).AcquireWrite(ctx, "doc", redlock.WithWait(50*time.Millisecond)); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("writer: %v", err)
		}
		waitUntil(t, "the writer that gave up left no intent", func() bool { return count(rs.hget(t, "doc", "intent"), "") == 3 })
		for _, s := range rs.servers {
			if _, err := s.Do("HSET", "doc", "intent", "vanished", "intent:exp", time.Now().Add(300*time.Millisecond).UnixMilli()); err != nil {
				t.Fatal(err)
			}
		}
		r2, err := rs.client(t, path).AcquireRead(ctx, "doc", redlock.WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("reader behind a vanished writer's intent: %v", err)
		}
		_ = r.Release(ctx)
		_ = r2.Release(ctx)
	})
}

func TestRW_failedAttemptIsRolledBack(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 5)
		ctx := ctxT(t)
		// A writer holds the lock on three masters.
		for _, s := range rs.servers[:3] {
			conn, err := redis.Dial("tcp", s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			_, err = redigot.Do(scripts.RW, conn, time.Second, "doc", "write", "foreign", 60000, 1000, "w")
			conn.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
		_, err := rs.client(t, path).AcquireRead(ctx, "doc", redlock.WithWait(0))
		if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("err = %v", err)
		}
		waitUntil(t, "no reader entry is left", func() bool { return rs.exists(t, "doc") == 3 })
	})
}

func TestRW_releaseWakesWaiters(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			wl, err := rs.client(t, path).AcquireWrite(ctx, "doc")
			if err != nil {
				t.Fatal(err)
			}
			expectWake(t, path, rs, []string{"doc"}, func(c *redlock.Client) (func(context.Context) error, error) {
				return releaser(c.AcquireRead(ctx, "doc", redlock.WithWait(time.Hour)))
			}, wl.Release)
		})
	})
}

func TestMulti_allOrNothing(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := ctxT(t)
			c := rs.client(t, path)
			// b is held elsewhere on every master: nothing of a, b, c is set.
			other, err := rs.client(t, path).Acquire(ctx, "b")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.AcquireMulti(ctx, []string{"a", "b", "c"}, redlock.WithWait(0)); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("err = %v", err)
			}
			waitUntil(t, "nothing of the refused lock is left", func() bool {
				return rs.exists(t, "a") == 0 && rs.exists(t, "c") == 0
			})
			if err := other.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l, err := c.AcquireMulti(ctx, []string{"a", "b", "c"})
			if err != nil {
				t.Fatal(err)
			}
			if got := l.Keys(); len(got) != 3 || l.Key() != "a" {
				t.Fatalf("Keys() = %v, Key() = %q", got, l.Key())
			}
			// On each master all three keys are set, or none (a master that
			// had not yet seen b's release refused the whole set); a quorum
			// set them.
			held := 0
			for i := range rs.servers {
				set := 0
				for _, k := range []string{"a", "b", "c"} {
					if rs.values(t, k)[i] == l.Token() {
						set++
					}
				}
				if set == 3 {
					held++
				}
			}
			if held < n/2+1 {
				t.Fatalf("all three keys set on %d masters, want a quorum", held)
			}
			if err := l.Extend(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "every key released on every master", func() bool {
				return rs.exists(t, "a")+rs.exists(t, "b")+rs.exists(t, "c") == 0
			})
		})
	})
}

// Two clients lock overlapping sets in opposite orders; all-or-nothing
// per master means neither can hold one part and wait for the other.
func TestMulti_overlappingSetsNeitherDeadlockNorOverlap(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 5)
		ctx := ctxT(t)
		sets := [][]string{{"a", "b"}, {"b", "a"}, {"b", "c"}, {"c", "b"}}
		var holdingB atomic.Int32
		var wg sync.WaitGroup
		for _, set := range sets {
			c := rs.client(t, path)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					l, err := c.AcquireMulti(ctx, set, redlock.WithWait(20*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					if holdingB.Add(1) != 1 {
						t.Error("two holders of b at once")
					}
					time.Sleep(time.Millisecond) // the subject: a hold long enough for an overlap to show
					holdingB.Add(-1)
					if err := l.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
}

func TestMulti_releaseOfAnyKeyWakesWaiter(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		held, err := rs.client(t, path).Acquire(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		expectWake(t, path, rs, []string{"a", "b", "c"}, func(c *redlock.Client) (func(context.Context) error, error) {
			return releaser(c.AcquireMulti(ctx, []string{"a", "b", "c"}, redlock.WithWait(time.Hour)))
		}, held.Release)
	})
}

func TestMulti_badKeysAreRejectedWithoutTraffic(t *testing.T) {
	rs := startReal(t, 1)
	ctx := ctxT(t)
	c := rs.client(t, pipelinedPath, redlock.WithClusterSlots())
	for name, keys := range map[string][]string{
		"none":            nil,
		"empty key":       {"a", ""},
		"duplicate":       {"a", "b", "a"},
		"different slots": {"order:7:items", "order:7:payment"},
	} {
		_, err := c.AcquireMulti(ctx, keys)
		if !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
		if name == "different slots" && err != nil {
			t.Logf("%s: %v", name, err)
		}
	}
	l, err := c.AcquireMulti(ctx, []string{"{order:7}:items", "{order:7}:payment"})
	if err != nil {
		t.Fatalf("keys with a common hash tag: %v", err)
	}
	_ = l.Release(ctx)
	if n, _ := redis.Int(rs.servers[0].Do("DBSIZE")); n != 0 {
		t.Fatalf("%d keys left", n)
	}
	// Without WithClusterSlots any keys go.
	l, err = rs.client(t, pipelinedPath).AcquireMulti(ctx, []string{"order:7:items", "order:7:payment"})
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
}

func TestKinds_rejectFairAndFencing(t *testing.T) {
	rs := startReal(t, 1)
	ctx := ctxT(t)
	c := rs.client(t, pipelinedPath)
	if _, err := c.AcquireRead(ctx, "k", redlock.WithFair()); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("read + fair: %v", err)
	}
	if _, err := c.AcquireMulti(ctx, []string{"a"}, redlock.WithFencing()); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("multi + fencing: %v", err)
	}
	if _, err := c.NewReentrant("k", "o", redlock.WithFencing()); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("reentrant + fencing: %v", err)
	}
	if _, err := c.NewReentrant("", "o"); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("reentrant with an empty key: %v", err)
	}
}
