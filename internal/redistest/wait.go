package redistest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Eventually polls cond (see WaitFor) until it holds, failing t with what
// if it does not within d. It is how a test waits for state that settles
// asynchronously — the last master of a round that returned at a quorum,
// a waiter registered, a connection taken — never a fixed sleep.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if !WaitFor(ctx, cond) {
		t.Fatalf("not within %v: %s", d, what)
	}
}

// Within polls cond (see WaitFor) for up to d and reports whether it held:
// Eventually for a test that reports the failure itself.
func Within(d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return WaitFor(ctx, cond)
}

// HoldEverywhere puts token at key, for ttl, on each of servers that does
// not hold it yet. A call that returns at a quorum (Acquire) may leave a
// master whose SET was still on its way, or timed out; a test that then
// reads, restarts or pauses every master needs the key on all of them.
// A master may still hold an earlier failed attempt's token there, until
// that attempt's rollback runs: HoldEverywhere waits for it, and fails t
// where another value stays for 10 s.
func HoldEverywhere(t testing.TB, servers []*Server, key, token string, ttl time.Duration) {
	t.Helper()
	for i, s := range servers {
		var v string
		var err error
		if !Within(10*time.Second, func() bool {
			v, err = redis.String(s.Do("SET", key, token, "PX", ttl.Milliseconds(), "NX", "GET"))
			return errors.Is(err, redis.ErrNil) || (err == nil && v == token)
		}) {
			if err != nil {
				t.Fatalf("SET on server %d: %v", i, err)
			}
			t.Fatalf("server %d holds %q at %s, not %q, for 10s", i, v, key, token)
		}
	}
}
