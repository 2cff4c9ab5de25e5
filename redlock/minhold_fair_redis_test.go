package redlock_test

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// A fair lock with a minimum hold released early does not keep the queue
// for longer than the minimum: a fair waiter gets the lock soon after the
// minimum, as a plain waiter does, not only when the released holder's
// queue entry expires.
func TestMinHold_fairWaiterGetsTheLockSoonAfterTheMinimum(t *testing.T) {
	const minHold = 200 * time.Millisecond
	rs := startReal(t, 3)
	a, b := rs.client(t, pipelinedPath), rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	waits := map[bool]time.Duration{}
	for _, fair := range []bool{false, true} {
		key := "slot-plain"
		var opts []redlock.LockOption
		if fair {
			key, opts = "slot-fair", []redlock.LockOption{redlock.WithFair()}
		}
		l, err := a.Acquire(ctx, key, append(opts, redlock.WithTTL(5*time.Second), redlock.WithMinHold(minHold))...)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		if fair {
			head, _ := redis.Strings(rs.servers[0].Do("ZRANGE", layout.QueueKey(key), 0, -1))
			pttl, _ := redis.Int(rs.servers[0].Do("PTTL", layout.QueueKey(key)))
			t.Logf("fair queue after the early release: %v (PTTL %d ms)", head, pttl)
		}
		l2, err := b.Acquire(ctx, key, append(opts, redlock.WithTTL(5*time.Second))...)
		if err != nil {
			t.Fatal(err)
		}
		waits[fair] = time.Since(released)
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("fair=%v: the waiter got the lock %v after the early release (minimum %v)", fair, waits[fair].Round(time.Millisecond), minHold)
	}
	// Minimum, plus a few backoffs and round trips, as for a plain waiter.
	if limit := max(waits[false], minHold) + 500*time.Millisecond; waits[true] > limit {
		t.Errorf("the fair waiter waited %v, over %v (plain waiter: %v): the released holder's queue entry kept the head",
			waits[true], limit, waits[false])
	}
}
