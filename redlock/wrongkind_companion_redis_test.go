package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// A reentrant or read-write acquisition that carries metadata runs its
// script wrapped: the lock script writes the lock key first, then the
// wrapper writes the metadata hash. When the metadata key holds another
// type (a user's string there), the wrapper's HSET answers WRONGTYPE after
// the lock key was written. That answer is about a companion key, not the
// lock key: the hold the script granted must not stay on the master. The
// attempt fails (or not), and afterwards no master may keep a hold that
// nobody tracks: another owner acquires the key as soon as the attempt's
// rounds have ended.
func TestWrongKind_metadataKeyOfAnotherTypeLeavesNoHold(t *testing.T) {
	one := func(key string) []string { return []string{key} }
	for _, tc := range []struct {
		name string
		try  func(ctx context.Context, c *redlock.Client, key string) error
		// keys are the lock keys the attempt writes; the metadata key
		// of the last one holds a string.
		keys func(key string) []string
	}{
		{"reentrant", func(ctx context.Context, c *redlock.Client, key string) error {
			r, err := c.NewReentrant(key, "owner-a", redlock.WithTTL(time.Minute), redlock.WithMetadata("host-a"))
			if err != nil {
				return err
			}
			return r.TryAcquire(ctx)
		}, one},
		{"read", func(ctx context.Context, c *redlock.Client, key string) error {
			_, err := c.TryAcquireRead(ctx, key, redlock.WithTTL(time.Minute), redlock.WithMetadata("host-a"))
			return err
		}, one},
		{"multi-key", func(ctx context.Context, c *redlock.Client, key string) error {
			_, err := c.TryAcquireMulti(ctx, multiCompanionKeys(key), redlock.WithTTL(time.Minute), redlock.WithMetadata("host-a"))
			return err
		}, multiCompanionKeys},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachPath(t, func(t *testing.T, path connPath) {
				forEachN(t, func(t *testing.T, n int) {
					rs := startReal(t, n)
					ctx := ctxT(t)
					key := "companion:" + tc.name
					lockKeys := tc.keys(key)
					// The metadata key is a string on every master.
					meta := layout.MetaKey(lockKeys[len(lockKeys)-1])
					for i, s := range rs.servers {
						if _, err := s.Do("SET", meta, "not-a-hash", "PX", 60000); err != nil {
							t.Fatalf("master %d: %v", i, err)
						}
					}
					c := rs.client(t, path)
					err := tc.try(ctx, c, key)
					t.Logf("attempt: %v (ErrWrongKind: %v)", err, errors.Is(err, redlock.ErrWrongKind))
					if err == nil {
						t.Fatalf("the attempt succeeded, though no master could store its metadata")
					}
					// Whatever the client decided, its rounds end within
					// a few timeouts; then nothing of the attempt stays.
					ok := redistest.WaitFor(ctx, func() bool {
						for _, s := range rs.servers {
							for _, k := range lockKeys {
								if n, _ := redis.Int(s.Do("EXISTS", k)); n == 1 {
									return false
								}
							}
						}
						return true
					})
					if !ok {
						var held []string
						for i, s := range rs.servers {
							for _, k := range lockKeys {
								typ, _ := redis.String(s.Do("TYPE", k))
								pttl, _ := redis.Int(s.Do("PTTL", k))
								v := typ
								if typ == "hash" {
									m, _ := redis.StringMap(s.Do("HGETALL", k))
									v = fmt.Sprint(m)
								}
								held = append(held, fmt.Sprintf("master %d %s: %v (PTTL %d ms)", i, k, v, pttl))
							}
						}
						t.Fatalf("after a failed attempt the masters still hold the key: %v", held)
					}
				})
			})
		})
	}
}

// multiCompanionKeys are the two keys of the multi-key case, in one slot.
func multiCompanionKeys(key string) []string {
	return []string{"{" + key + "}:a", "{" + key + "}:b"}
}
