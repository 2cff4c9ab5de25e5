package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// scriptCalls is how many EVAL and EVALSHA commands master s has run.
func scriptCalls(s *redistest.Server) int { return s.Calls("eval") + s.Calls("evalsha") }

// warmUp makes c's first contact with its masters (the identity probe,
// the scripts loaded) by taking and releasing a lock of key, so that what
// a test counts next is its own. It waits up to 10 s for the lock: a
// first contact may outlast a short per-master timeout on a busy machine.
func warmUp(t *testing.T, c *redlock.Client, key string) {
	t.Helper()
	l, err := c.Acquire(context.Background(), key, redlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A failed attempt's SET that waited unanswered on a connection the client
// gave up runs on the master only after the rollback that came in on
// another connection found nothing to delete (a master frozen or busy runs
// what it had buffered in any order). The rollback is confirmed: sent once
// more after it answered, it deletes the late grant, long before its TTL.
// So too when the rollback that found nothing was itself a retry (the
// first one timed out, unrun).
//
// A proxy holds the SET until a rollback has run, lets it run then, and
// holds any later rollback until the SET has run, so the order is the
// harmful one every time.
func TestRollback_overtakenBySETIsConfirmed(t *testing.T) {
	redistest.SkipShort(t)
	for _, tc := range []struct {
		name  string
		unrun int32 // rollbacks that time out, never run, before one runs
	}{{"rollback", 0}, {"retry", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.StartOne(t)
			key := "confirm:overtaken:" + tc.name
			const timeout = 100 * time.Millisecond
			setRun := make(chan struct{}) // closed once the held SET may run
			var onceSet sync.Once
			lateSet := make(chan string, 1) // the held SET's outcome
			var rollbacks atomic.Int32
			scripts0 := -1
			var mu sync.Mutex
			hook := func(c *hostile.Conn, cmd []string) hostile.Verdict {
				switch {
				case cmd[0] == "SET" && len(cmd) > 1 && cmd[1] == key:
					held := false
					onceSet.Do(func() { held = true })
					if held {
						select {
						case <-setRun:
						case <-c.Quit():
							return hostile.HangUp
						}
						// It runs now, late; its reply goes nowhere.
						v, err := s.Run(cmd)
						lateSet <- fmt.Sprintf("%v, %v", v, err)
						return hostile.HangUp
					}
				case (cmd[0] == "EVALSHA" || cmd[0] == "EVAL") && len(cmd) > 3 && cmd[3] == key:
					n := rollbacks.Add(1)
					switch {
					case n <= tc.unrun:
						// Unanswered past the client's bound, never run.
						select {
						case <-time.After(3 * timeout):
						case <-c.Quit():
						}
						return hostile.HangUp
					case n == tc.unrun+1:
						mu.Lock()
						before := scripts0
						mu.Unlock()
						go func() {
							// Once this rollback ran (found nothing), the
							// SET runs.
							ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
							defer cancel()
							redistest.WaitFor(ctx, func() bool { return scriptCalls(s) > before })
							close(setRun)
						}()
						return hostile.Forward
					}
					// A later rollback runs after the SET.
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					redistest.WaitFor(ctx, func() bool {
						n, err := redis.Int(s.Do("EXISTS", key))
						return err == nil && n == 1
					})
				}
				return hostile.Forward
			}
			p := hostile.NewProxy(t, s.Addr(), hook)
			c, err := redigo.NewFromAddrs([]string{p.Addr()}, redlock.WithTimeout(timeout), redigo.WithPipelining(false))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// First contact (the identity probe, scripts loaded) before
			// counting.
			warmUp(t, c, key+":warm")
			mu.Lock()
			scripts0 = scriptCalls(s)
			mu.Unlock()
			if _, err := c.TryAcquire(context.Background(), key, redlock.WithTTL(time.Minute)); err == nil {
				t.Fatal("granted by a master whose SET was held")
			}
			select {
			case v := <-lateSet:
				if v != "OK, <nil>" {
					t.Fatalf("the late SET: %s, want OK", v)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no rollback ran on the master, so neither did the SET")
			}
			if !s.WaitAbsent(key, 3*time.Second) {
				pttl, _ := redis.Int64(s.Do("PTTL", key))
				t.Fatalf("the late grant stays on the master (PTTL %d ms; %d rollbacks sent): the rollback it overtook was not confirmed", pttl, rollbacks.Load())
			}
			t.Logf("%d rollbacks sent", rollbacks.Load())
		})
	}
}
