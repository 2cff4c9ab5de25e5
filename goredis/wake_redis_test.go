package goredis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/redlock"
)

// refusalGate holds back, once armed, the replies to the first batch that
// carries key on each of n masters' go-redis clients (through refusalHook)
// until every one of them returned; the last to return runs release first.
// The release thus falls after every master ran the waiter's attempt and
// before the waiter's Client has seen a single reply: before it registers
// as a waiter, and so before it subscribes to the key's channel. It is the
// goredis counterpart of the core's test hook redlock.SetBeforeWait (which
// this module cannot reach).
type refusalGate struct {
	t       *testing.T
	key     string
	n       int
	release func()
	armed   atomic.Bool
	mu      sync.Mutex
	arrived int
	open    chan struct{}
}

// refusalHook is a refusalGate's go-redis hook on one master's client.
type refusalHook struct {
	g     *refusalGate
	taken atomic.Bool // this client's batch was held
}

func (h *refusalHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *refusalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *refusalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.g.armed.Load() && carries(cmds, h.g.key) && h.taken.CompareAndSwap(false, true) {
			h.g.arrive()
		}
		return err
	}
}

// arrive is one master's batch returning: the last runs the release, the
// others wait for it.
func (g *refusalGate) arrive() {
	g.mu.Lock()
	g.arrived++
	last := g.arrived == g.n
	g.mu.Unlock()
	if last {
		g.release()
		close(g.open)
		return
	}
	select {
	case <-g.open:
	case <-time.After(10 * time.Second):
		g.t.Error("not every master's batch carried the waiter's attempt")
	}
}

// carries reports whether one of cmds names key among its arguments.
func carries(cmds []redis.Cmder, key string) bool {
	for _, c := range cmds {
		for _, a := range c.Args() {
			if s, ok := a.(string); ok && s == key {
				return true
			}
		}
	}
	return false
}

// A release that happens after every master refused a waiter's attempt
// but before the waiter's subscription is live is not lost: the waiter,
// on a fake clock whose backoff and fallback poll never fire, still gets
// the lock, and within the per-master timeout (the second attempt is made
// once the key's channel is live on every master). Both with the key's
// channel not yet subscribed (the waiter subscribes, then tries once
// more) and with it still subscribed from an earlier wait (the notice,
// which finds no waiter, is counted as heard). The counterpart of the
// core's TestRelease_betweenRefusalAndSubscriptionIsHeard, through
// go-redis's PubSub.
func TestNew_releaseBetweenRefusalAndSubscriptionIsHeard(t *testing.T) {
	for _, n := range []int{1, 5} {
		for _, warm := range []bool{false, true} {
			t.Run(fmt.Sprintf("N=%d/subscribed=%v", n, warm), func(t *testing.T) {
				ms := startMasters(t, n)
				ctx := ctxFor(t)
				const key = "window"
				channel := "quorumlock:released:" + key
				holder := ms.lockClient(t)

				g := &refusalGate{t: t, key: key, n: n, open: make(chan struct{})}
				clients := make([]redis.UniversalClient, n)
				for i, s := range ms.servers {
					c := redis.NewClient(&redis.Options{Addr: s.addr, ReadTimeout: time.Second, WriteTimeout: time.Second})
					c.AddHook(&refusalHook{g: g})
					t.Cleanup(func() { c.Close() })
					clients[i] = c
				}
				fake := clock.NewFake(time.Unix(1_700_000_000, 0))
				w, err := New(clients, redlock.WithTimeout(lockTimeout), withClock(fake))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { w.Close() })

				if warm {
					// An earlier wait on the key, woken by a release:
					// its channel lingers, subscribed and live.
					l, err := holder.Acquire(ctx, key, redlock.WithTTL(time.Minute))
					if err != nil {
						t.Fatal(err)
					}
					ms.expectWakeOn(t, w, fake, []string{key}, func(c *redlock.Client) (func(context.Context) error, error) {
						return releaser(c.Acquire(ctx, key, redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour)))
					}, l.Release)
				}

				// The holder takes the key on every master (a release
				// returns once a quorum ran it: the earlier waiter's may
				// still be on its way to the others).
				waitFor(t, "the key is free on every master", func() bool { return ms.count(t, key) == 0 })
				l, err := holder.Acquire(ctx, key, redlock.WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the holder holds the key on every master", func() bool { return ms.holders(t, key, l.Token()) == n })
				var released time.Time
				g.release = func() {
					// The waiter has not subscribed yet (cold), or is
					// still subscribed from its earlier wait (warm).
					want := int64(0)
					if warm {
						want = 1
					}
					for i, a := range ms.admin {
						got, err := a.PubSubNumSub(context.Background(), channel).Result()
						if err != nil || got[channel] != want {
							t.Errorf("master %d: %d subscribers on the key's channel at the release (%v), want %d", i, got[channel], err, want)
						}
					}
					if err := l.Release(context.Background()); err != nil {
						t.Error(err)
					}
					if !poll(10*time.Second, func() bool {
						held := int64(0)
						for _, a := range ms.admin {
							n, err := a.Exists(context.Background(), key).Result()
							if err != nil {
								t.Error(err)
							}
							held += n
						}
						return held == 0
					}) {
						t.Error("not every master ran the release")
					}
					released = time.Now()
				}
				g.armed.Store(true)

				got := make(chan error, 1)
				go func() {
					l, err := w.Acquire(ctx, key, redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour))
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
				case <-time.After(10 * time.Second):
					t.Fatal("the release in the window was not heard: the waiter sleeps")
				}
				select {
				case <-g.open:
				default:
					t.Fatal("the waiter got the lock without its attempt being held back")
				}
				took := time.Since(released)
				t.Logf("acquired %v after the release", took)
				if took > lockTimeout {
					t.Fatalf("acquired %v after the release: later than its re-check, which lasts one per-master timeout (%v)", took, lockTimeout)
				}
			})
		}
	}
}
