package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
)

// A fair holder that got its quorum without one master (the key was still
// held there for another) takes its queue entry out on that master too
// when it releases: left there, the entry headed that master's queue until
// it expired (1.1 s by default), and the master refused every other waiter
// meanwhile — each of which then won without it too, and left its own
// entry there in turn. Measured before the fix with 16 clients handing a
// fair key over on three masters: one master carried 11-29 such entries
// throughout and held the key in 55-109 of 200 samples, the others in
// 188-199.
//
// Each call returns at a quorum, and the third master may answer after it
// (a clean-clone CI run read that master's queue before its answer came), so
// the test waits for that master's state. The long backoff makes the entry
// outlive the wait many times over (4 × backoff max + 2 × timeout), so only
// the release, not the entry's expiry, can take it out within the wait.
func TestFair_releaseTakesTheEntryOutWhereTheLockWasNotHeld(t *testing.T) {
	redistest.SkipShort(t)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			servers := redistest.Start(t, 3)
			key := "fair:release:" + p.name
			x := servers[2]
			if _, err := x.Do("SET", key, "another-token", "PX", 60_000); err != nil {
				t.Fatal(err)
			}
			a := leadClient(t, servers, p.pipelined)
			// A dial that timed out on a loaded machine leaves its master
			// known down for a while: the single attempt below needs the
			// masters that are free, so the client first locks a key on
			// every master.
			redistest.Eventually(t, 10*time.Second, "a lock granted by every master", func() bool {
				l, err := a.TryAcquire(context.Background(), key+":warm")
				if err != nil {
					return false
				}
				defer l.Release(context.Background())
				return redistest.Within(time.Second, func() bool {
					for _, s := range servers {
						if v, _ := redis.String(s.Do("GET", key+":warm")); v != l.Token() {
							return false
						}
					}
					return true
				})
			})
			fair := []LockOption{WithFair(), WithTTL(time.Minute), WithBackoff(10*time.Millisecond, 15*time.Second)}
			la, err := a.TryAcquire(context.Background(), key, fair...)
			if err != nil {
				t.Fatal(err)
			}
			var q []string
			queued := func(n int) func() bool {
				return func() bool {
					q, err = redis.Strings(x.Do("ZRANGE", layout.QueueKey(key), 0, -1))
					return err == nil && len(q) == n
				}
			}
			if !redistest.WaitFor(ctx5s(t), queued(1)) {
				t.Fatalf("the master that refused the holder queues %v (%v), not the holder alone", q, err)
			}
			// The other token's hold ends there; then the holder releases.
			if _, err := x.Do("DEL", key); err != nil {
				t.Fatal(err)
			}
			if err := la.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !redistest.WaitFor(ctx5s(t), queued(0)) {
				t.Errorf("the released holder's entry is still queued on the master that refused it: %v (%v)", q, err)
			}
			b := leadClient(t, servers, p.pipelined)
			lb, err := b.TryAcquire(context.Background(), key, fair...)
			if err != nil {
				t.Fatal(err)
			}
			defer lb.Release(context.Background())
			var tok string
			if !redistest.WaitFor(ctx5s(t), func() bool {
				tok, _ = redis.String(x.Do("GET", key))
				return tok == lb.Token()
			}) {
				t.Errorf("the next waiter was refused by that master (it holds %q)", tok)
			}
		})
	}
}

// A writer that got its quorum without one master (a reader's entry was
// still there, so that master set the writer's intent instead) withdraws
// the intent there too when it releases: left there, it turned every reader
// and every other writer away on that master until it expired (1.1 s by
// default), as a released fair holder's queue entry did.
// It waits for the third master as the fair test does, and for the same
// reason.
func TestRW_releaseTakesTheIntentOutWhereTheLockWasNotHeld(t *testing.T) {
	redistest.SkipShort(t)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			servers := redistest.Start(t, 3)
			key := "rw:release:" + p.name
			x := servers[2]
			now, err := redis.Int64s(x.Do("TIME"))
			if err != nil {
				t.Fatal(err)
			}
			exp := now[0]*1000 + now[1]/1000 + time.Minute.Milliseconds()
			if _, err := x.Do("HSET", key, "r:left", exp); err != nil {
				t.Fatal(err)
			}
			w := leadClient(t, servers, p.pipelined)
			rw := []LockOption{WithTTL(time.Minute), WithBackoff(10*time.Millisecond, 15*time.Second)}
			lw, err := w.TryAcquireWrite(context.Background(), key, rw...)
			if err != nil {
				t.Fatal(err)
			}
			intent := func(want bool) func() bool {
				return func() bool {
					n, err := redis.Int(x.Do("HEXISTS", key, "intent"))
					return err == nil && (n == 1) == want
				}
			}
			if !redistest.WaitFor(ctx5s(t), intent(true)) {
				t.Fatal("the master that refused the writer holds no intent")
			}
			// The reader's entry goes there; then the writer releases.
			if _, err := x.Do("HDEL", key, "r:left"); err != nil {
				t.Fatal(err)
			}
			if err := lw.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !redistest.WaitFor(ctx5s(t), intent(false)) {
				t.Error("the released writer's intent still stands on the master that refused it")
			}
			r := leadClient(t, servers, p.pipelined)
			lr, err := r.TryAcquireRead(context.Background(), key, rw...)
			if err != nil {
				t.Fatal(err)
			}
			defer lr.Release(context.Background())
			if !redistest.WaitFor(ctx5s(t), func() bool {
				n, _ := redis.Int(x.Do("HEXISTS", key, "r:"+lr.Token()))
				return n == 1
			}) {
				t.Error("the next reader was turned away by that master")
			}
		})
	}
}
