package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/redlock"
)

func queueLen(t *testing.T, rs *realSet, key string) int {
	t.Helper()
	n, err := redis.Int(rs.servers[0].Do("ZCARD", "{"+key+"}:queue"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFair_servesWaitersInArrivalOrder(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := context.Background()
			holder := rs.client(t, path)
			l, err := holder.Acquire(ctx, "k", redlock.WithFair())
			if err != nil {
				t.Fatal(err)
			}
			const waiters = 5
			order := make(chan int, waiters)
			errs := make(chan error, waiters)
			for w := 0; w < waiters; w++ {
				c := rs.client(t, path) // each waiter its own client, as its own process
				go func() {
					l, err := c.Acquire(ctx, "k", redlock.WithFair(), redlock.WithWait(30*time.Second))
					if err != nil {
						errs <- err
						return
					}
					order <- w
					time.Sleep(5 * time.Millisecond) // the subject: a hold long enough for an overlap to show
					errs <- l.Release(ctx)
				}()
				// The next waiter arrives only once this one has its place.
				waitUntil(t, fmt.Sprintf("waiter %d queued", w), func() bool { return queueLen(t, rs, "k") == w+2 })
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			for w := 0; w < waiters; w++ {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
				if got := <-order; got != w {
					t.Fatalf("lock %d went to waiter %d: not in arrival order", w, got)
				}
			}
			waitUntil(t, "the queue is empty", func() bool { return queueLen(t, rs, "k") == 0 })
		})
	})
}

func TestFair_vanishedWaiterDoesNotBlockTheQueue(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			ctx := context.Background()
			holder, next := rs.client(t, path), rs.client(t, path)
			l, err := holder.Acquire(ctx, "k", redlock.WithFair())
			if err != nil {
				t.Fatal(err)
			}
			// A waiter took its place and then vanished (its process died):
			// an entry that nobody refreshes, first in line.
			arrival := time.Now().Add(-time.Second).UnixMicro()
			for _, s := range rs.servers {
				if _, err := s.Do("ZADD", "{k}:queue", arrival, "vanished"); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Do("ZADD", "{k}:queue-deadlines", time.Now().Add(time.Second).UnixMilli(), "vanished"); err != nil {
					t.Fatal(err)
				}
			}
			// ... behind it another waits.
			got := make(chan error, 1)
			start := time.Now()
			go func() {
				l2, err := next.Acquire(ctx, "k", redlock.WithFair(), redlock.WithWait(time.Minute))
				if err == nil {
					err = l2.Release(ctx)
				}
				got <- err
			}()
			waitUntil(t, "the next waiter queued", func() bool { return queueLen(t, rs, "k") == 3 })
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("the waiter behind a vanished one got the lock after %v", time.Since(start).Round(time.Millisecond))
			case <-time.After(20 * time.Second):
				t.Fatal("a vanished waiter blocked the queue")
			}
		})
	})
}

func TestFair_waiterThatGivesUpLeavesTheQueue(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := context.Background()
		holder, quitter := rs.client(t, path), rs.client(t, path)
		l, err := holder.Acquire(ctx, "k", redlock.WithFair())
		if err != nil {
			t.Fatal(err)
		}
		qctx, quit := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = quitter.Acquire(qctx, "k", redlock.WithFair(), redlock.WithWait(time.Minute))
		}()
		waitUntil(t, "the waiter queued", func() bool { return queueLen(t, rs, "k") == 2 })
		quit()
		<-done
		waitUntil(t, "the waiter left the queue", func() bool { return queueLen(t, rs, "k") == 1 })
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestFair_tryAcquirePollingWinsOnceFree(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := context.Background()
		holder, poller := rs.client(t, path), rs.client(t, path)
		l, err := holder.Acquire(ctx, "k", redlock.WithFair())
		if err != nil {
			t.Fatal(err)
		}
		released := time.Now().Add(600 * time.Millisecond)
		time.AfterFunc(time.Until(released), func() { _ = l.Release(ctx) })
		tries, wins := 0, 0
		var wonAt time.Time
		for time.Since(released) < 3*time.Second && wins == 0 {
			tries++
			got, err := poller.TryAcquire(ctx, "k", redlock.WithFair())
			if err == nil {
				wins++
				wonAt = time.Now()
				if err := got.Release(ctx); err != nil {
					t.Fatal(err)
				}
				break
			}
			if !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // the subject: a TryAcquire polled every 100 ms
		}
		if wins == 0 {
			t.Fatalf("%d fair TryAcquire calls, none won in the 3s after the release; %d entries in the queue",
				tries, queueLen(t, rs, "k"))
		}
		t.Logf("won at try %d, %v after the release", tries, wonAt.Sub(released).Round(time.Millisecond))
		waitUntil(t, "the queue is empty", func() bool { return queueLen(t, rs, "k") == 0 })
	})
}

func TestFair_singleAttemptLeavesTheQueue(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		for _, tc := range []struct {
			name string
			try  func(c *redlock.Client) error
		}{
			{"TryAcquire", func(c *redlock.Client) error {
				_, err := c.TryAcquire(context.Background(), "k", redlock.WithFair())
				return err
			}},
			{"Acquire WithWait(0)", func(c *redlock.Client) error {
				_, err := c.Acquire(context.Background(), "k", redlock.WithFair(), redlock.WithWait(0))
				return err
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				rs := startReal(t, 3)
				holder, other := rs.client(t, path), rs.client(t, path)
				l, err := holder.Acquire(context.Background(), "k", redlock.WithFair())
				if err != nil {
					t.Fatal(err)
				}
				if err := tc.try(other); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("attempt on a held key = %v, want ErrNotAcquired", err)
				}
				// Only the holder's own entry is left.
				waitUntil(t, "the waiter left the queue", func() bool { return queueLen(t, rs, "k") == 1 })
				if err := l.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}
