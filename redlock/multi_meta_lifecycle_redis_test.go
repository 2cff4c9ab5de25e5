package redlock_test

// A multi-key lock's per-key metadata over its whole life: expiry, refusal
// by another holder (of any kind) of one of its keys, a release after one
// of its keys changed hands, and a master stopped during the release.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// noPersistentKey fails t for any key without a TTL on rs's masters but
// fencing counters: a metadata hash must never outlive its lock key.
func noPersistentKey(t *testing.T, rs *realSet) {
	t.Helper()
	for i, s := range rs.servers {
		for _, k := range keysOn(t, s) {
			if strings.HasSuffix(k, ":fence") {
				continue
			}
			if ttl, err := redis.Int64(s.Do("PTTL", k)); err == nil && ttl == -1 {
				t.Errorf("master %d: %s has no TTL", i, k)
			}
		}
	}
}

// absentOn reports whether no master of rs holds any of keys or their
// metadata hashes.
func absentOn(rs *realSet, keys ...string) bool {
	for _, s := range rs.servers {
		for _, k := range keys {
			if n, _ := redis.Int(s.Do("EXISTS", k, layout.MetaKey(k))); n != 0 {
				return false
			}
		}
	}
	return true
}

// A multi-key lock never released leaves nothing once its TTL ran out: each
// key's metadata goes with its key.
func TestMultiMeta_metadataExpiresWithItsKeys(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		l, err := c.AcquireMulti(ctxT(t), multiMetaKeys, redlock.WithTTL(1500*time.Millisecond), redlock.WithMetadata("host=x"))
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "metadata not on every master", func() bool {
			for _, k := range multiMetaKeys {
				if v, _ := rs.metaOn(t, k, l.Token()); !all(v, "host=x") {
					return false
				}
			}
			return true
		})
		noPersistentKey(t, rs)
		leftover.Within(t, 10*time.Second, rs.servers)
	})
}

// A multi-key attempt refused because another client holds one of its
// keys (as a plain lock, a read lock or a reentrant lock, each with its
// own metadata) writes nothing, leaves the other holder's metadata and its
// TTL as they were, and after the other holder's release nothing is left.
func TestMultiMeta_refusedByAnotherHolderKeepsItsMetadata(t *testing.T) {
	type holder struct {
		name    string
		acquire func(t *testing.T, c *redlock.Client, key string) (tok string, release func() error)
	}
	holders := []holder{
		{"plain", func(t *testing.T, c *redlock.Client, key string) (string, func() error) {
			l, err := c.Acquire(ctxT(t), key, redlock.WithTTL(30*time.Second), redlock.WithMetadata("other"))
			if err != nil {
				t.Fatal(err)
			}
			return l.Token(), func() error { return l.Release(context.Background()) }
		}},
		{"read", func(t *testing.T, c *redlock.Client, key string) (string, func() error) {
			l, err := c.AcquireRead(ctxT(t), key, redlock.WithTTL(30*time.Second), redlock.WithMetadata("other"))
			if err != nil {
				t.Fatal(err)
			}
			return l.Token(), func() error { return l.Release(context.Background()) }
		}},
		{"reentrant", func(t *testing.T, c *redlock.Client, key string) (string, func() error) {
			r, err := c.NewReentrant(key, "owner-1", redlock.WithTTL(30*time.Second), redlock.WithMetadata("other"))
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Acquire(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			return "owner-1", func() error { return r.Release(context.Background()) }
		}},
	}
	forEachPath(t, func(t *testing.T, path connPath) {
		for _, h := range holders {
			t.Run(h.name, func(t *testing.T) {
				rs := startReal(t, 3)
				other := rs.client(t, path)
				c := rs.client(t, path)
				held := multiMetaKeys[1]
				tok, release := h.acquire(t, other, held)
				eventually(t, "the other holder's metadata not on every master", func() bool {
					v, _ := rs.metaOn(t, held, tok)
					return all(v, "other")
				})
				_, ttlsBefore := rs.metaOn(t, held, tok)
				l, err := c.TryAcquireMulti(ctxT(t), multiMetaKeys, redlock.WithTTL(10*time.Second), redlock.WithMetadata("me"))
				if err == nil {
					l.Release(context.Background())
					t.Fatal("a multi-key lock took a key another client holds")
				}
				if !errors.Is(err, redlock.ErrNotAcquired) {
					t.Errorf("refusal: %v, want ErrNotAcquired", err)
				}
				// Let every master run the attempt (and any rollback).
				eventually(t, "the refused attempt left keys", func() bool {
					return absentOn(rs, multiMetaKeys[0], multiMetaKeys[2])
				})
				v, ttls := rs.metaOn(t, held, tok)
				if !all(v, "other") {
					t.Errorf("the other holder's metadata after the refused attempt: %q", v)
				}
				for i := range ttls {
					if ttls[i] <= 0 || ttls[i] > ttlsBefore[i] {
						t.Errorf("master %d: the other holder's metadata TTL %d ms after the attempt (%d before)", i, ttls[i], ttlsBefore[i])
					}
				}
				for i, s := range rs.servers {
					fields, err := redis.Strings(s.Do("HKEYS", layout.MetaKey(held)))
					if err != nil {
						t.Fatal(err)
					}
					if len(fields) != 1 {
						t.Errorf("master %d: metadata fields of %s: %q, want only the holder's", i, held, fields)
					}
				}
				if err := release(); err != nil {
					t.Fatal(err)
				}
				leftover.None(t, rs.servers)
			})
		}
	})
}

// A multi-key lock one of whose keys changed hands (it expired and another
// client took it, with its own metadata) is released: its other keys and
// their metadata go, the new holder's key and metadata stay untouched, with
// the new holder's TTL; after the new holder's release nothing is left.
func TestMultiMeta_releaseAfterAKeyChangedHandsKeepsTheNewHoldersMetadata(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		other := rs.client(t, path)
		ctx := ctxT(t)
		l, err := c.AcquireMulti(ctx, multiMetaKeys, redlock.WithTTL(20*time.Second), redlock.WithMetadata("me"))
		if err != nil {
			t.Fatal(err)
		}
		taken := multiMetaKeys[1]
		eventually(t, "metadata not on every master", func() bool {
			v, _ := rs.metaOn(t, taken, l.Token())
			return all(v, "me")
		})
		// As if the key had expired alone: the key goes, its hash stays
		// (a hash always outlives its key by a few µs at most).
		for _, s := range rs.servers {
			if _, err := s.Do("DEL", taken); err != nil {
				t.Fatal(err)
			}
		}
		ol, err := other.TryAcquire(ctx, taken, redlock.WithTTL(30*time.Second), redlock.WithMetadata("other"))
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "the new holder's metadata not on every master", func() bool {
			v, _ := rs.metaOn(t, taken, ol.Token())
			return all(v, "other")
		})
		err = l.Release(ctx)
		if err == nil {
			t.Log("release of a partly taken multi-key lock returned nil")
		}
		eventually(t, "the released keys or their metadata are still there", func() bool {
			return absentOn(rs, multiMetaKeys[0], multiMetaKeys[2])
		})
		if got := rs.values(t, taken); !all(got, ol.Token()) {
			t.Errorf("the new holder's key after the release: %q", got)
		}
		v, ttls := rs.metaOn(t, taken, ol.Token())
		if !all(v, "other") {
			t.Errorf("the new holder's metadata after the release: %q", v)
		}
		for i, ttl := range ttls {
			if ttl <= 20000 {
				t.Errorf("master %d: the new holder's metadata TTL %d ms, want its key's (~30 s)", i, ttl)
			}
		}
		mine, _ := rs.metaOn(t, taken, l.Token())
		if !all(mine, "") {
			t.Errorf("the released holder's field is still in %s: %q", layout.MetaKey(taken), mine)
		}
		if got := inspectMeta(t, c, taken, ol.Token()); !all(got, "other") {
			t.Errorf("Inspect of %s shows %q for its new holder", taken, got)
		}
		if err := ol.Release(ctx); err != nil {
			t.Fatal(err)
		}
		leftover.None(t, rs.servers)
	})
}

// A master stopped (SIGSTOP) while a multi-key lock with metadata is
// released, and resumed afterwards, ends with nothing left: neither a
// lock key nor a metadata hash, and no key without a TTL meanwhile.
func TestMultiMeta_releaseWithAStoppedMasterLeavesNoMetadata(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		ctx := ctxT(t)
		l, err := c.AcquireMulti(ctx, multiMetaKeys, redlock.WithTTL(4*time.Second), redlock.WithMetadata("me"))
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "metadata not on every master", func() bool {
			for _, k := range multiMetaKeys {
				if v, _ := rs.metaOn(t, k, l.Token()); !all(v, "me") {
					return false
				}
			}
			return true
		})
		stopped := rs.servers[2]
		if err := stopped.Pause(); err != nil {
			t.Fatal(err)
		}
		relErr := l.Release(ctx)
		if err := stopped.Resume(); err != nil {
			t.Fatal(err)
		}
		if relErr != nil {
			t.Errorf("release with one master of three stopped: %v", relErr)
		}
		noPersistentKey(t, rs)
		leftover.Within(t, 15*time.Second, rs.servers)
	})
}

// A multi-key lock with metadata taken while one master is stopped (it
// runs the grant late, once resumed) and then released leaves nothing.
func TestMultiMeta_grantToAStoppedMasterLeavesNoMetadata(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		ctx := ctxT(t)
		stopped := rs.servers[2]
		if err := stopped.Pause(); err != nil {
			t.Fatal(err)
		}
		l, err := c.AcquireMulti(ctx, multiMetaKeys, redlock.WithTTL(4*time.Second), redlock.WithMetadata("me"))
		if rerr := stopped.Resume(); rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		noPersistentKey(t, rs)
		leftover.Within(t, 15*time.Second, rs.servers)
	})
}
