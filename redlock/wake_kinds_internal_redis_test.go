package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Each lock kind through the wake path on five masters: a holder (another
// client) holds the key, a waiter on a fake clock (only a notice can wake
// it) waits, the holder releases; the waiter gets the lock, and once it
// released nothing is left on any master but a fence counter.
func TestWake_everyKindThroughTheWakePath(t *testing.T) {
	redistest.SkipShort(t)
	type acq func(ctx context.Context, c *Client, key string, opts ...LockOption) (func() error, error)
	plain := func(ctx context.Context, c *Client, key string, opts ...LockOption) (func() error, error) {
		l, err := c.Acquire(ctx, key, opts...)
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(context.Background()) }, nil
	}
	for _, tc := range []struct {
		name   string
		holder acq
		waiter acq
	}{
		{"fenced", plain, func(ctx context.Context, c *Client, key string, opts ...LockOption) (func() error, error) {
			l, err := c.Acquire(ctx, key, append(opts, WithFencing())...)
			if err != nil {
				return nil, err
			}
			if l.Fence() == 0 {
				return nil, fmt.Errorf("no fencing token")
			}
			return func() error { return l.Release(context.Background()) }, nil
		}},
		{"meta", plain, func(ctx context.Context, c *Client, key string, opts ...LockOption) (func() error, error) {
			return plain(ctx, c, key, append(opts, WithMetadata("hello"))...)
		}},
		{"reentrant", plain, func(ctx context.Context, c *Client, key string, opts ...LockOption) (func() error, error) {
			r, err := c.NewReentrant(key, "owner-1", opts...)
			if err != nil {
				return nil, err
			}
			if err := r.Acquire(ctx); err != nil {
				return nil, err
			}
			if err := r.Acquire(ctx); err != nil { // again: count 2
				return nil, err
			}
			return func() error {
				if err := r.Release(context.Background()); err != nil {
					return err
				}
				return r.Release(context.Background())
			}, nil
		}},
		{"multi", plain, func(ctx context.Context, c *Client, key string, opts ...LockOption) (func() error, error) {
			l, err := c.AcquireMulti(ctx, []string{key + ":b", key}, opts...)
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(context.Background()) }, nil
		}},
		{"fair", plain, func(ctx context.Context, c *Client, key string, opts ...LockOption) (func() error, error) {
			return plain(ctx, c, key, append(opts, WithFair())...)
		}},
		{"write-after-write", func(ctx context.Context, c *Client, key string, opts ...LockOption) (func() error, error) {
			l, err := c.AcquireWrite(ctx, key, opts...)
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(context.Background()) }, nil
		}, func(ctx context.Context, c *Client, key string, opts ...LockOption) (func() error, error) {
			l, err := c.AcquireWrite(ctx, key, opts...)
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(context.Background()) }, nil
		}},
	} {
		for _, p := range leadPaths {
			t.Run(tc.name+"/"+p.name, func(t *testing.T) {
				servers := redistest.Start(t, 5)
				// Generous per-master timeouts, as awaitHeldIn's.
				holder := leadClient(t, servers, p.pipelined, WithTimeout(realTimeoutIn))
				fake := clock.NewFake(time.Unix(1_700_000_000, 0))
				w := leadClient(t, servers, p.pipelined, WithClock(fake), WithTimeout(realTimeoutIn))
				settled := settledCount(w)
				key := "wake:kind:" + tc.name
				release, err := tc.holder(context.Background(), holder, key, WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan error, 1)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go func() {
					rel, err := tc.waiter(ctx, w, key, WithTTL(time.Minute), WithWait(time.Hour))
					if err == nil {
						err = rel()
					}
					got <- err
				}()
				if !redistest.WaitFor(ctx5s(t), func() bool {
					for _, s := range servers {
						if a27NumSub(t, s, wakeChannel(key)) != 1 {
							return false
						}
					}
					// its re-check after the subscription is over too
					return fake.Pending() >= 1 && settled.Load() >= 1
				}) {
					cancel()
					t.Fatalf("the waiter does not wait: %v", <-got)
				}
				if err := release(); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-got:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(5 * time.Second):
					for i, s := range servers {
						v, _ := redis.StringMap(s.Do("HGETALL", key))
						kind, _ := redis.String(s.Do("TYPE", key))
						t.Logf("master %d: %s %v", i, kind, v)
					}
					cancel()
					t.Fatalf("the release woke nobody: %v", <-got)
				}
				// every key of the lock: the multi-key lock's second too
				leftover.None(t, servers, key, key+":b")
			})
		}
	}
}

// Readers in several clients (fake clocks) wait for a writer; its release
// wakes them all in: the first reader's led attempt must not shut the
// others out (readers share).
func TestWake_wokenReadersAllGetIn(t *testing.T) {
	redistest.SkipShort(t)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			servers := redistest.Start(t, 5)
			// Generous per-master timeouts, as awaitHeldIn's.
			holder := leadClient(t, servers, p.pipelined, WithTimeout(realTimeoutIn))
			key := "wake:readers:" + p.name
			wl, err := holder.AcquireWrite(context.Background(), key, WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			const readers = 4
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var in atomic.Int32
			got := make(chan error, readers)
			fakes := make([]*clock.Fake, readers)
			settled := make([]*atomic.Int64, readers)
			release := make(chan struct{})
			for i := range readers {
				fakes[i] = clock.NewFake(time.Unix(1_700_000_000, 0))
				c := leadClient(t, servers, p.pipelined, WithClock(fakes[i]), WithTimeout(realTimeoutIn))
				settled[i] = settledCount(c)
				go func() {
					l, err := c.AcquireRead(ctx, key, WithTTL(time.Minute), WithWait(time.Hour))
					if err == nil {
						in.Add(1)
						<-release
						err = l.Release(context.Background())
					}
					got <- err
				}()
			}
			// Each waits: subscribed on every master, its backoff timer
			// pending and its re-check after the subscription over.
			waiting := func() string {
				for i, s := range servers {
					if n := a27NumSub(t, s, wakeChannel(key)); n != readers {
						return fmt.Sprintf("%d of %d readers subscribed on master %d", n, readers, i)
					}
				}
				for i, f := range fakes {
					if f.Pending() < 1 || settled[i].Load() < 1 {
						return fmt.Sprintf("reader %d: %d timers pending, %d pauses begun settled", i, f.Pending(), settled[i].Load())
					}
				}
				return ""
			}
			if !redistest.WaitFor(ctx5s(t), func() bool { return waiting() == "" }) {
				t.Fatalf("the readers do not wait: %s", waiting())
			}
			if err := wl.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			all := redistest.WaitFor(ctx5s(t), func() bool { return in.Load() == readers })
			n := in.Load()
			close(release)
			if !all {
				cancel()
				t.Errorf("%d of %d woken readers got in", n, readers)
			}
			for range readers {
				if err := <-got; err != nil && all {
					t.Error(err)
				}
			}
			leftover.None(t, servers, key)
		})
	}
}

// A master publishes junk on a key's wake channel while a waiter (fake
// clock) waits and the key is held: the waiter does not crash or get the
// lock, and the real release still wakes it.
func TestWake_hostileNoticesIgnored(t *testing.T) {
	redistest.SkipShort(t)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			key := "wake:hostile:" + p.name
			a := awaitHeld(t, p.pipelined, key)
			servers, l, got := a.servers, a.held, a.got
			junk := []string{"x/999999999", "/", "//", "abc/-1", "abc/+1", "abc/0", "abc/1",
				"abc/999999", "abc/1e9", "", strings.Repeat("z", 100000) + "/1"}
			// (Not the release's own id, the token's first 8 characters: a
			// master that forges it ahead of the release makes its real
			// notices duplicates, which wake nobody.)
			for _, s := range servers {
				for _, m := range junk {
					if _, err := s.Do("PUBLISH", wakeChannel(key), m); err != nil {
						t.Fatal(err)
					}
				}
			}
			time.Sleep(300 * time.Millisecond) // the subject: a spell in which the junk notices must not end the waiter
			select {
			case err := <-got:
				t.Fatalf("the waiter ended on junk notices: %v", err)
			default:
			}
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				a.cancel()
				t.Fatalf("the release after junk woke nobody: %v", <-got)
			}
		})
	}
}
