package redlock_test

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// A reentrant lock with metadata whose metadata key a user turned into a
// string while it was held: the release deletes the lock key (the lock
// script runs first), then the wrapper's HDEL of the metadata meets the
// string. The lock key is gone on every master, and Release says so
// rather than calling the lock key another kind's.
func TestWrongKind_releaseWithAWrongTypeMetadataKeyFreesTheKey(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		c := rs.client(t, path)
		key := "release-meta"
		r, err := c.NewReentrant(key, "owner-a", redlock.WithTTL(time.Minute), redlock.WithMetadata("host-a"))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		held := func(s *redistest.Server) bool { n, _ := redis.Int(s.Do("EXISTS", key)); return n == 1 }
		if !redistest.WaitFor(ctx, func() bool { return held(rs.servers[0]) && held(rs.servers[1]) && held(rs.servers[2]) }) {
			t.Fatal("not held on every master")
		}
		for _, s := range rs.servers {
			if _, err := s.Do("SET", layout.MetaKey(key), "not-a-hash"); err != nil {
				t.Fatal(err)
			}
		}
		err = r.Release(ctx)
		if !redistest.WaitFor(ctx, func() bool { return !held(rs.servers[0]) && !held(rs.servers[1]) && !held(rs.servers[2]) }) {
			t.Errorf("the lock key is still on a master after Release")
		}
		if err != nil {
			t.Errorf("Release: %v, though it deleted the lock key on every master", err)
		}
	})
}
