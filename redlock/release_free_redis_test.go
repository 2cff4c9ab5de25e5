package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// A release succeeds once a quorum of masters are known not to hold the
// lock's token: those that deleted it now, and those that answer "not
// this token" where no command of the lock that places it can still run
// (docs/design.md, "What a release confirms"). These tests take a lock
// on exactly a quorum (the other masters are held by someone else while
// it is taken, and free again when it is released) and stop (SIGSTOP)
// one master that granted it.

// releaseKind takes one kind of lock on key, and what keeps that kind
// from being granted on a master.
type releaseKind struct {
	name string
	// block takes, through c, a hold that makes take fail on c's masters.
	block func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error)
	// take takes the lock and returns its release.
	take func(ctx context.Context, c *redlock.Client, key string) (func(context.Context) error, error)
}

func releaseKinds() []releaseKind {
	ttl := redlock.WithTTL(30 * time.Second)
	plain := func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
		return c.TryAcquire(ctx, key, ttl)
	}
	lockRelease := func(l *redlock.Lock, err error) (func(context.Context) error, error) {
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
	return []releaseKind{
		{"plain", plain, func(ctx context.Context, c *redlock.Client, key string) (func(context.Context) error, error) {
			return lockRelease(c.TryAcquire(ctx, key, ttl))
		}},
		{"fair", func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
			return c.TryAcquire(ctx, key, ttl, redlock.WithFair())
		}, func(ctx context.Context, c *redlock.Client, key string) (func(context.Context) error, error) {
			return lockRelease(c.TryAcquire(ctx, key, ttl, redlock.WithFair()))
		}},
		{"reentrant", func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
			r, err := c.NewReentrant(key, "blocker", ttl)
			if err != nil {
				return nil, err
			}
			if err := r.TryAcquire(ctx); err != nil {
				return nil, err
			}
			return r.Lock(), nil
		}, func(ctx context.Context, c *redlock.Client, key string) (func(context.Context) error, error) {
			r, err := c.NewReentrant(key, "", ttl)
			if err != nil {
				return nil, err
			}
			if err := r.TryAcquire(ctx); err != nil {
				return nil, err
			}
			// Held twice: the first release only sets the count, which
			// the masters that hold it confirm; the second frees it.
			if err := r.TryAcquire(ctx); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				if err := r.Release(ctx); err != nil {
					return fmt.Errorf("first of two releases: %w", err)
				}
				return r.Release(ctx)
			}, nil
		}},
		{"read", func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
			return c.TryAcquireWrite(ctx, key, ttl)
		}, func(ctx context.Context, c *redlock.Client, key string) (func(context.Context) error, error) {
			return lockRelease(c.TryAcquireRead(ctx, key, ttl))
		}},
		{"write", func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
			return c.TryAcquireRead(ctx, key, ttl)
		}, func(ctx context.Context, c *redlock.Client, key string) (func(context.Context) error, error) {
			return lockRelease(c.TryAcquireWrite(ctx, key, ttl))
		}},
		{"multi", func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
			return c.TryAcquire(ctx, key+":b", ttl)
		}, func(ctx context.Context, c *redlock.Client, key string) (func(context.Context) error, error) {
			return lockRelease(c.TryAcquireMulti(ctx, []string{key + ":a", key + ":b"}, ttl))
		}},
	}
}

// grantedByQuorum takes a lock of kind k on key through c, granted by
// exactly a quorum of rs's masters: the others are held by a blocker
// while it is taken, and freed again before this returns. It returns the
// lock's release.
func grantedByQuorum(t *testing.T, ctx context.Context, rs *realSet, path connPath, c *redlock.Client, k releaseKind, key string) func(context.Context) error {
	t.Helper()
	n := len(rs.servers)
	others := n - (n/2 + 1)
	blocker, err := redigo.New(rs.pools[:others], testOptions(path, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close()
	held, err := k.block(ctx, blocker, key)
	if err != nil {
		t.Fatalf("blocker on masters 0-%d: %v", others-1, err)
	}
	release, err := k.take(ctx, c, key)
	if err != nil {
		t.Fatalf("%s lock on masters %d-%d: %v", k.name, others, n-1, err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("blocker's release: %v", err)
	}
	return release
}

// pause stops master i of rs until the test ends (resumed before the
// test's clients close).
func (rs *realSet) pause(t *testing.T, i int) {
	t.Helper()
	if err := rs.servers[i].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.servers[i].Resume() })
}

// Masters that never granted the lock, free of its token, count for its
// release with those that deleted it, while a master that granted it is
// stopped: every kind, on both paths, N=3 and N=5.
func TestRelease_mastersThatNeverHeldItCountWithAStoppedMaster(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			forEachPath(t, func(t *testing.T, path connPath) {
				for _, k := range releaseKinds() {
					if n == 5 && k.name != "plain" {
						continue // the kinds differ in their scripts, not in the count
					}
					t.Run(k.name, func(t *testing.T) {
						rs := startReal(t, n)
						c := rs.client(t, path)
						ctx := ctxT(t)
						key := "free:" + k.name
						release := grantedByQuorum(t, ctx, rs, path, c, k, key)
						rs.pause(t, n-1)
						start := time.Now()
						err := release(ctx)
						took := time.Since(start)
						if err != nil {
							t.Fatalf("release with %d masters that never held it and master %d stopped: %v", n-(n/2+1), n-1, err)
						}
						t.Logf("released in %v", took)
						if k.name == "plain" {
							if err := rs.servers[n-1].Resume(); err != nil {
								t.Fatal(err)
							}
							if !rs.servers[n-1].WaitAbsent(key, 10*time.Second) {
								t.Errorf("the stopped master still holds %s 10 s after it resumed", key)
							}
						}
					})
				}
			})
		})
	}
}

// Too few masters confirmed either way: ErrNotReleased, on both paths.
// With N=5, two masters that never held the lock and one that deleted it
// are enough (three of five are free of the token), and two that never
// held it alone are not.
func TestRelease_tooFewConfirmedIsNotReleased(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		for _, n := range []int{3, 5} {
			t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
				rs := startReal(t, n)
				c := rs.client(t, path)
				ctx := ctxT(t)
				release := grantedByQuorum(t, ctx, rs, path, c, releaseKinds()[0], "few")
				// Every master that granted it stopped: only the others answer.
				for i := n - (n/2 + 1); i < n; i++ {
					rs.pause(t, i)
				}
				short, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				err := release(short)
				if !errors.Is(err, redlock.ErrNotReleased) || errors.Is(err, redlock.ErrNotHeld) {
					t.Fatalf("release with every master that granted it stopped: %v, want ErrNotReleased", err)
				}
				t.Log(err)
			})
		}
	})
}

// A lock whose validity ran out, and one taken by another token on a
// quorum, are reported ErrNotHeld, also with a master stopped.
func TestRelease_expiredOrTakenIsNotHeld(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		t.Run("expired", func(t *testing.T) {
			rs := startReal(t, 5)
			c := rs.client(t, path)
			ctx := ctxT(t)
			release := grantedByQuorum(t, ctx, rs, path, c, releaseKind{
				name: "plain",
				block: func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
					return c.TryAcquire(ctx, key, redlock.WithTTL(30*time.Second))
				},
				take: func(ctx context.Context, c *redlock.Client, key string) (func(context.Context) error, error) {
					l, err := c.TryAcquire(ctx, key, redlock.WithTTL(time.Second))
					if err != nil {
						return nil, err
					}
					return l.Release, nil
				},
			}, "expired")
			rs.pause(t, 4)
			for i := 2; i < 4; i++ {
				if !rs.servers[i].WaitAbsent("expired", 10*time.Second) {
					t.Fatalf("master %d still holds the key 10 s after its TTL", i)
				}
			}
			err := release(ctx)
			if !errors.Is(err, redlock.ErrNotHeld) {
				t.Fatalf("release of an expired lock: %v, want ErrNotHeld", err)
			}
			t.Log(err)
		})
		t.Run("taken", func(t *testing.T) {
			rs := startReal(t, 3)
			c := rs.client(t, path)
			ctx := ctxT(t)
			l, err := c.TryAcquire(ctx, "taken", redlock.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			// Waited for: TryAcquire returns at a quorum.
			waitUntil(t, "every master holds the lock", func() bool { return count(rs.values(t, "taken"), l.Token()) == 3 })
			for i := 0; i < 2; i++ {
				if _, err := rs.servers[i].Do("SET", "taken", "another-token", "PX", 30000); err != nil {
					t.Fatal(err)
				}
			}
			rs.pause(t, 2)
			err = l.Release(ctx)
			if !errors.Is(err, redlock.ErrNotHeld) {
				t.Fatalf("release of a lock another token holds on a quorum: %v, want ErrNotHeld", err)
			}
			t.Log(err)
		})
	})
}

// A release waits for masters that are slow, not hung: every master
// stopped for 300 ms, six default per-master timeouts, and then running
// again, still confirms it (a loaded host slows all masters at once).
func TestRelease_slowMastersStillConfirmIt(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path, redlock.WithTimeout(redlock.DefaultTimeout))
		ctx := ctxT(t)
		// Acquire tries again where the first contact (dials, script
		// loads) outlasts the 50 ms per-master timeout on a busy machine.
		l, err := c.Acquire(ctx, "slow", redlock.WithTTL(30*time.Second), redlock.WithWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "every master holds the lock", func() bool { return count(rs.values(t, "slow"), l.Token()) == 3 })
		for i := range rs.servers {
			rs.pause(t, i)
		}
		resumed := make(chan struct{})
		go func() {
			defer close(resumed)
			time.Sleep(300 * time.Millisecond) // the subject: the masters are slow for 300 ms
			for _, s := range rs.servers {
				_ = s.Resume()
			}
		}()
		start := time.Now()
		err = l.Release(ctx)
		<-resumed
		if err != nil {
			t.Fatalf("release with every master slow for 300 ms: %v after %v", err, time.Since(start))
		}
		t.Logf("released in %v", time.Since(start))
	})
}
