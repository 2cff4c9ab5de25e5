package goredis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
)

// A release through this adapter counts, with the masters that deleted
// the lock, those that never held it (they refused it: another holder had
// the key there while it was taken) while a master that granted it is
// stopped; with every master that granted it stopped it is not confirmed
// (ErrNotReleased), and a lock another token took on a quorum is not
// held (ErrNotHeld). On the adapter's Ordered transport and on one it
// cannot see through (opaque: the Client chains its rounds), N=3 and N=5.
func TestRelease_mastersThatNeverHeldItCountWithAStoppedMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	for _, opaque := range []bool{false, true} {
		for _, n := range []int{3, 5} {
			t.Run(fmt.Sprintf("opaque=%v/N=%d", opaque, n), func(t *testing.T) {
				ms := startMasters(t, n)
				clients := ms.clients
				if opaque {
					clients = make([]redis.UniversalClient, n)
					for i, c := range ms.clients {
						clients[i] = opaqueClient{c.(*redis.Client)}
					}
				}
				quorum := n/2 + 1
				others := n - quorum
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				for i := 0; i < others; i++ {
					if err := ms.admin[i].Set(ctx, "free", "another-token", 30*time.Second).Err(); err != nil {
						t.Fatal(err)
					}
				}
				c, err := New(clients, redlock.WithTimeout(500*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				l, err := c.TryAcquire(ctx, "free", redlock.WithTTL(30*time.Second))
				if err != nil {
					t.Fatalf("lock on masters %d-%d: %v", others, n-1, err)
				}
				for i := 0; i < others; i++ {
					if err := ms.admin[i].Del(ctx, "free").Err(); err != nil {
						t.Fatal(err)
					}
				}
				ms.servers[n-1].stop()
				defer ms.servers[n-1].cont()
				if err := l.Release(ctx); err != nil {
					t.Fatalf("release with %d masters that never held it and master %d stopped: %v", others, n-1, err)
				}

				// Every master that granted it stopped: not confirmed.
				l, err = c.TryAcquire(ctx, "few", redlock.WithTTL(30*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < quorum; i++ {
					ms.servers[i].stop()
					defer ms.servers[i].cont()
				}
				short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
				defer cancelShort()
				if err := l.Release(short); !errors.Is(err, redlock.ErrNotReleased) || errors.Is(err, redlock.ErrNotHeld) {
					t.Fatalf("release with %d of %d masters stopped: %v, want ErrNotReleased", quorum, n, err)
				}
			})
		}
	}
}

// A lock another token holds on a quorum is not held, also with a master
// stopped.
func TestRelease_takenIsNotHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	ms := startMasters(t, 3)
	c := ms.lockClient(t, redlock.WithTimeout(500*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.TryAcquire(ctx, "taken", redlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := ms.admin[i].Set(ctx, "taken", "another-token", 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ms.servers[2].stop()
	defer ms.servers[2].cont()
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("release of a lock another token holds on a quorum: %v, want ErrNotHeld", err)
	}
}

// A release through the adapter waits for masters that are slow, not
// hung: every master stopped for 300 ms (six default per-master timeouts)
// and then running again still confirms it.
func TestRelease_slowMastersStillConfirmIt(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	ms := startMasters(t, 3)
	c := ms.lockClient(t, redlock.WithTimeout(redlock.DefaultTimeout))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Acquire tries again where the first contact outlasts the 50 ms
	// per-master timeout on a busy machine.
	l, err := c.Acquire(ctx, "slow", redlock.WithTTL(30*time.Second), redlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ms.servers {
		s.stop()
		defer s.cont()
	}
	resumed := make(chan struct{})
	go func() {
		defer close(resumed)
		time.Sleep(300 * time.Millisecond) // the subject: how long the masters are slow
		for _, s := range ms.servers {
			s.cont()
		}
	}()
	start := time.Now()
	err = l.Release(ctx)
	<-resumed
	if err != nil {
		t.Fatalf("release with every master slow for 300 ms: %v after %v", err, time.Since(start))
	}
}
