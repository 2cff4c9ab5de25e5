package redlock_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// A plain lock whose key some masters now hold as another kind's hash
// (its string expired or was deleted there, and a read-write lock took
// the key) extends only with a quorum of the masters that still hold
// its token: a master answering WRONGTYPE is a refusal, never counted
// for the extension, listed in Refused and WrongKind, not Failed. The
// release afterwards leaves the other kind's hash alone.
func TestWrongKind_extendCountsNoMasterOfAnotherKind(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forEachN(t, func(t *testing.T, n int) {
			for _, wrong := range []int{n / 2, n/2 + 1} {
				rs := startReal(t, n)
				ctx := ctxT(t)
				c := rs.client(t, path)
				key := "wrongkind-extend"
				start := time.Now()
				l, err := c.Acquire(ctx, key, redlock.WithTTL(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if !redistest.WaitFor(ctx, func() bool { return count(rs.values(t, key), l.Token()) == n }) {
					t.Fatalf("masters hold %v", rs.values(t, key))
				}
				// The last wrong masters: their copy goes, another kind's
				// hash takes the key.
				for i := n - wrong; i < n; i++ {
					if _, err := rs.servers[i].Do("DEL", key); err != nil {
						t.Fatal(err)
					}
					if _, err := rs.servers[i].Do("HSET", key, "r:other", "1"); err != nil {
						t.Fatal(err)
					}
				}
				err = l.Extend(ctx, 20*time.Second)
				quorum := n/2 + 1
				if n-wrong >= quorum {
					if err != nil {
						t.Fatalf("wrong=%d: Extend: %v, want success with %d of %d masters", wrong, err, n-wrong, n)
					}
				} else {
					if !errors.Is(err, redlock.ErrNotExtended) && !errors.Is(err, redlock.ErrLockLost) {
						t.Fatalf("wrong=%d: Extend: %v, want a failure (%d of %d hold the token)", wrong, err, n-wrong, n)
					}
					var qe *redlock.QuorumError
					if !errors.As(err, &qe) {
						t.Fatalf("%T is not a *QuorumError: %v", err, err)
					}
					if qe.Failed != nil {
						t.Errorf("wrong=%d: failures %v, want refusals", wrong, qe.Failed)
					}
					for i := n - wrong; i < n; i++ {
						if !slices.Contains(qe.Refused, i) && !slices.Contains(qe.Unanswered, i) {
							t.Errorf("wrong=%d: master %d (another kind) neither refused nor unanswered: %v", wrong, i, err)
						}
					}
					if qe.WrongKind == nil || !errors.Is(err, redlock.ErrWrongKind) {
						t.Errorf("wrong=%d: no master of another kind named: %v", wrong, err)
					}
					if u := l.Until(); u.After(start.Add(10 * time.Second)) {
						t.Errorf("wrong=%d: Until %v after a failed extension, past the acquisition's TTL", wrong, time.Until(u))
					}
				}
				_ = l.Release(ctx)
				c.Close()
				for i := n - wrong; i < n; i++ {
					v, err := redis.String(rs.servers[i].Do("HGET", key, "r:other"))
					if err != nil || v != "1" {
						t.Errorf("wrong=%d: master %d: the other kind's hash is gone (%q, %v)", wrong, i, v, err)
					}
				}
				for i := 0; i < n-wrong; i++ {
					if v, _ := redis.String(rs.servers[i].Do("GET", key)); v != "" {
						t.Errorf("wrong=%d: master %d still holds %q after release", wrong, i, v)
					}
				}
			}
		})
	})
}
