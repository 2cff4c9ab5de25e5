package redlock_test

// Ordering on each master: every round of one token (a reentrant owner, a
// fair waiter, a writer) reaches each master after the previous round of
// the same token on that master, on both connection paths.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// A reentrant owner's attempts share one token, so a late rollback of an
// earlier attempt must not reach a master after the next attempt's grant
// there: it would delete that grant, and another owner could then win a
// quorum while the first still holds its lock.
func TestReentrant_lateRollbackKeepsNextAttempt(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		ca := rs.client(t, path, redlock.WithTimeout(5*time.Second))
		// The masters are identified (the first contact's INFO probe)
		// before master 2 freezes: the attempts below are what is tested.
		if _, err := ca.Inspect(ctx, "warm-up"); err != nil {
			t.Fatal(err)
		}
		// A woken waiter asks the key's lead first (lead.go): the key is
		// one whose lead is master 0, so that attempt 2 (woken) wins
		// master 0 and asks the others.
		key := ""
		for i := 0; key == ""; i++ {
			if k := fmt.Sprintf("lock%d", i); redlock.LeadFor(ca, k) == 0 {
				key = k
			}
		}
		channel := "quorumlock:released:" + key
		// Another owner holds masters 0 and 1; master 2 is frozen.
		for _, s := range rs.servers[:2] {
			if _, err := s.Do("HSET", key, "x", 1); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Do("PEXPIRE", key, 60000); err != nil {
				t.Fatal(err)
			}
		}
		if err := rs.servers[2].Pause(); err != nil {
			t.Fatal(err)
		}
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				if err := rs.servers[2].Resume(); err != nil {
					t.Error(err)
				}
			}
		}
		defer resume()
		a, err := ca.NewReentrant(key, "owner-a",
			redlock.WithTTL(time.Minute), redlock.WithWait(time.Minute), redlock.WithBackoff(time.Minute, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- a.Acquire(ctx) }()
		// Attempt 1 was refused by masters 0 and 1 (its command to master
		// 2 is pending): the waiter subscribed.
		waitUntil(t, "the first attempt failed and the owner waits", func() bool {
			return numSub(t, rs, 0, channel) == 1
		})
		// Master 0 frees up; wake the owner for attempt 2, which wins
		// master 0 and waits for master 2.
		if _, err := rs.servers[0].Do("DEL", key); err != nil {
			t.Fatal(err)
		}
		if _, err := rs.servers[0].Do("PUBLISH", channel, "someone"); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "attempt 2 won master 0", func() bool {
			v, err := redis.String(rs.servers[0].Do("HGET", key, "owner-a"))
			return err == nil && v == "1"
		})
		time.Sleep(50 * time.Millisecond) // attempt 2's command to master 2 is on its way
		resume()
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the owner did not get the lock")
		}
		// Give attempt 1's rollback time to run on master 2.
		time.Sleep(500 * time.Millisecond) // the subject: attempt 1's rollback had time to run, and must not take the new hold
		if vals := rs.hget(t, key, "owner-a"); count(vals, "1") < 2 {
			t.Fatalf("owner-a holds the lock, but only these masters know it: %q", vals)
		}
		// The other owner leaves master 1: a second owner must still be
		// refused.
		if _, err := rs.servers[1].Do("DEL", key); err != nil {
			t.Fatal(err)
		}
		b, err := rs.client(t, path).NewReentrant(key, "owner-b", redlock.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Acquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("a second owner acquired the lock while owner-a holds it: %v", err)
		}
		if err := a.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// A fenced acquisition whose commit round cannot start because the client
// is closing is rolled back like any failed attempt: Close leaves no lock
// on any master but those of acquisitions that returned a Lock.
func TestOrder_closeDuringFenceCommitLeavesNoKey(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		held := map[string]string{} // key → token of a returned lock
		var mu sync.Mutex
		for round := 0; round < 15; round++ {
			c, err := redigo.New(rs.pools, redlock.WithTimeout(realTimeout), path.Option())
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := 0; ; j++ {
						key := fmt.Sprintf("f%d-%d-%d", round, g, j)
						l, err := c.TryAcquire(ctx, key, redlock.WithFencing(), redlock.WithTTL(time.Minute))
						if err != nil {
							if !errors.Is(err, redlock.ErrClosed) && !errors.Is(err, redlock.ErrNotAcquired) {
								t.Errorf("%s: %v", key, err)
							}
							return
						}
						mu.Lock()
						held[key] = l.Token()
						mu.Unlock()
					}
				}()
			}
			time.Sleep(time.Duration(20+round*3) * time.Millisecond) // the subject: Close lands at a different moment each round
			c.Close()
			wg.Wait()
		}
		for i, s := range rs.servers {
			keys, err := redis.Strings(s.Do("KEYS", "f*"))
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				v, err := redis.String(s.Do("GET", k))
				if err != nil {
					t.Fatal(err)
				}
				if held[k] != v {
					t.Errorf("master %d: %s = %q left by an acquisition that returned no lock", i, k, v)
				}
			}
		}
	})
}
