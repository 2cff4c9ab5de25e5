// Package leftover is the tests' one check that a lock left nothing
// behind on its masters: after a failed attempt, a release, a rollback,
// a Close, or the TTL of what a fault cut short.
//
// What a lock may leave by design is its fencing counter (key:fence, kept
// so that tokens never go back) and a resource's highest fencing token
// seen (key:fence-seen); an election's term lives in the lock's metadata
// hash and goes with it. Everything else — the lock key itself (a
// string, a reentrant or read-write hash, a multi-key lock's keys), its
// metadata hash (key:meta), a fair lock's queue and deadlines
// (key:queue, key:queue-deadlines) — must be gone.
//
// A call that returns at a quorum does not wait for the last master, so
// every check here waits, with a bound, for the masters to agree; it
// fails only once the bound has passed, naming each master's address and
// what it still holds, with its type and PTTL.
package leftover

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/layout"
)

// Bound is how long None waits for the masters to hold nothing: the
// last master's command of a round that returned at a quorum, or a
// rollback retried by the finisher, is due long before.
const Bound = 10 * time.Second

// Master is a real Redis master a test started (*redistest.Server,
// *cluster.Master).
type Master interface {
	Addr() string
	Do(cmd string, args ...any) (any, error)
}

// None waits up to Bound until no master holds anything of the locks on
// keys but what outlives a lock by design (see the package comment), then
// fails t for each master and key still there. With no keys it checks
// every key on the masters: use it on masters the test started for
// itself.
func None[M Master](t testing.TB, masters []M, keys ...string) {
	t.Helper()
	Within(t, Bound, masters, keys...)
}

// Within is None with a bound of d, for a check that must hold sooner
// (a rollback due at once) or later (keys that stay until their TTL:
// pass the TTL plus a margin).
func Within[M Master](t testing.TB, d time.Duration, masters []M, keys ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var left []string
	for {
		left = left[:0]
		for _, m := range masters {
			left = append(left, On(m, keys...)...)
		}
		if len(left) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			for _, l := range left {
				t.Errorf("left behind after %v: %s", d, l)
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// On returns what m holds of the locks on keys (every key of m with no
// keys) that a lock must not leave, each as "ADDR: KEY (TYPE, PTTL n ms)";
// a master that cannot be read is one entry saying why.
func On(m Master, keys ...string) []string {
	var names []string
	if len(keys) == 0 {
		all, err := redis.Strings(m.Do("KEYS", "*"))
		if err != nil {
			return []string{fmt.Sprintf("%s: not read: %v", m.Addr(), err)}
		}
		for _, k := range all {
			if !Kept(k) {
				names = append(names, k)
			}
		}
	} else {
		for _, k := range keys {
			names = append(names, k, layout.MetaKey(k), layout.QueueKey(k), layout.QueueDeadlinesKey(k))
		}
	}
	var out []string
	for _, k := range names {
		typ, err := redis.String(m.Do("TYPE", k))
		if err != nil {
			return []string{fmt.Sprintf("%s: not read: %v", m.Addr(), err)}
		}
		if typ == "none" {
			continue
		}
		pttl, _ := redis.Int64(m.Do("PTTL", k))
		out = append(out, fmt.Sprintf("%s: %q (%s, PTTL %d ms)", m.Addr(), k, typ, pttl))
	}
	return out
}

// Kept reports whether key is one a lock leaves by design: a fencing
// counter or a resource's highest fencing token seen.
func Kept(key string) bool {
	return strings.HasSuffix(key, keys.FenceSuffix) || strings.HasSuffix(key, keys.FenceSeenSuffix)
}
