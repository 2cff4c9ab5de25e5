package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
)

// firstPauseClock is a fake clock (no timer ever fires) that runs hook,
// once armed, inside the first NewTimer call made after arming: the
// timer of the waiter's first pause (waker.Waiting.WaitOut), made right
// after it registered (beforeWait arms it).
type firstPauseClock struct {
	*clock.Fake
	armed atomic.Bool
	once  sync.Once
	hook  func()
}

func (c *firstPauseClock) NewTimer(d time.Duration) clock.Timer {
	if c.armed.Load() {
		c.once.Do(c.hook)
	}
	return c.Fake.NewTimer(d)
}

// A semaphore of 2 whose slots A and B are held. A new waiter's first
// pass is refused by both; before it registers, slot A is released (its
// notice is heard by nobody: this is what the recheck is for). Once its
// subscriptions are live, slot B is released too (its notice wakes the
// waiter) and another client takes slot B at once. The waiter's first
// pause then finds its recheck due with B's notice pending: it must still
// get slot A, free, without its backoff timer (which never fires here).
func TestSemaphore_newWaiterTakesASlotFreedBeforeItRegistered(t *testing.T) {
	redistest.SkipShort(t)
	for _, n := range []int{1, 3} {
		t.Run(map[int]string{1: "N=1", 3: "N=3"}[n], func(t *testing.T) {
			servers := redistest.Start(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			h := leadClient(t, servers, true)
			x := leadClient(t, servers, true)
			fc := &firstPauseClock{Fake: clock.NewFake(time.Unix(1_700_000_000, 0))}
			w := leadClient(t, servers, true, withClock(fc))
			const key = "recheck:sem"
			hs, err := h.NewSemaphore(key, 2, WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			ws, err := w.NewSemaphore(key, 2, WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			var held [2]*Permit
			for i := 0; i < 2; i++ {
				p, err := hs.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				held[p.Slot()] = p
			}
			absent := func(k string) func() bool { return absentOnAll(servers, k) }
			slotA, slotB := 1, 0
			keyA, keyB := layout.PermitKey(key, slotA), layout.PermitKey(key, slotB)
			var tookB *Lock
			fc.hook = func() {
				redistest.Eventually(t, 10*time.Second, "both slots live on every master", func() bool {
					return w.waker.Live(keyA) == n && w.waker.Live(keyB) == n
				})
				if err := held[slotB].Release(context.Background()); err != nil {
					t.Error(err)
				}
				redistest.Eventually(t, 10*time.Second, "slot B released everywhere", absent(keyB))
				l, err := x.Acquire(ctx, keyB, WithTTL(time.Minute))
				if err != nil {
					t.Error(err)
				}
				tookB = l
				// Let B's notices reach the waiter; should they be
				// late, the recheck is made and the test passes
				// unchecked.
				time.Sleep(200 * time.Millisecond)
			}
			var once sync.Once
			w.beforeWait = func() {
				once.Do(func() {
					if err := held[slotA].Release(context.Background()); err != nil {
						t.Error(err)
					}
					redistest.Eventually(t, 10*time.Second, "slot A released everywhere", absent(keyA))
					fc.armed.Store(true)
				})
			}
			if !acquiredWithin(t, ctx, 10*time.Second, func(ctx context.Context) error {
				p, err := ws.Acquire(ctx)
				if err == nil {
					t.Logf("waiter got slot %d", p.Slot())
					err = p.Release(context.Background())
				}
				return err
			}) {
				t.Fatalf("the waiter sleeps (until its backoff timer) while slot A is free (free on every master: %v)", absent(keyA)())
			}
			if tookB != nil {
				_ = tookB.Release(context.Background())
			}
		})
	}
}

// A plain lock's new waiter whose first pause finds its recheck due with
// a release notice pending, while the key is free on a quorum but held on
// the key's pilot by a stray (a minority leftover whose expiry nobody
// announces). The led (woken) attempt is refused by the pilot; a full
// recheck would have got the quorum.
func TestWait_newWaiterRechecksAfterItsWokenAttemptIsRefusedByThePilot(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := leadClient(t, servers, true)
	fc := &firstPauseClock{Fake: clock.NewFake(time.Unix(1_700_000_000, 0))}
	w := leadClient(t, servers, true, withClock(fc))
	const key = "recheck:lock"
	lead := w.leadFor(key)
	if lead < 0 {
		t.Fatal("no pilot")
	}
	l, err := h.Acquire(ctx, key, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	fc.hook = func() {
		redistest.Eventually(t, 10*time.Second, "live on every master", func() bool { return w.waker.Live(key) == 3 })
		if err := l.Release(context.Background()); err != nil {
			t.Error(err)
		}
		redistest.Eventually(t, 10*time.Second, "released everywhere", absentOnAll(servers, key))
		if _, err := servers[lead].Do("SET", key, "stray", "PX", 60000); err != nil {
			t.Error(err)
		}
		// Let the release's notices reach the waiter; should they be
		// late, the recheck is made and the test passes unchecked.
		time.Sleep(200 * time.Millisecond)
	}
	var once sync.Once
	w.beforeWait = func() { once.Do(func() { fc.armed.Store(true) }) }
	if !acquiredWithin(t, ctx, 10*time.Second, func(ctx context.Context) error {
		l, err := w.Acquire(ctx, key, WithTTL(time.Minute))
		if err == nil {
			err = l.Release(context.Background())
		}
		return err
	}) {
		t.Fatal("the waiter sleeps (until its backoff) while the key is free on 2 of 3 masters")
	}
}

// absentOnAll reports, when called, whether no master of servers holds
// key.
func absentOnAll(servers []*redistest.Server, key string) func() bool {
	return func() bool {
		for _, s := range servers {
			if n, _ := s.Do("EXISTS", key); n != int64(0) {
				return false
			}
		}
		return true
	}
}

// acquiredWithin runs acquire (an acquisition and its release) and
// reports whether it ended within d; past d it cancels acquire's context
// and waits for it. An error it returns fails the test.
func acquiredWithin(t *testing.T, ctx context.Context, d time.Duration, acquire func(context.Context) error) bool {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- acquire(ctx) }()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		return true
	case <-time.After(d):
		cancel()
		<-got
		return false
	}
}
