package redlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/redlock"
)

// multiMetaKeys are a multi-key lock's keys, in one hash slot.
var multiMetaKeys = []string{"{mm}:a", "{mm}:b", "{mm}:c"}

// A multi-key lock's holder metadata is kept with each of its keys: on
// every master, each key's metadata hash names the holder, with a TTL that
// follows that key's across an extension; Inspect of any key shows it; the
// release leaves nothing behind on any master.
func TestMultiMeta_metadataOnEveryKey(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
				rs := startReal(t, n)
				c := rs.client(t, path)
				ctx := ctxT(t)
				const meta = "host=a pid=7"
				l, err := c.AcquireMulti(ctx, multiMetaKeys, redlock.WithTTL(5*time.Second), redlock.WithMetadata(meta))
				if err != nil {
					t.Fatal(err)
				}
				for _, key := range multiMetaKeys {
					eventually(t, "metadata of "+key+" not on every master", func() bool {
						vals, ttls := rs.metaOn(t, key, l.Token())
						for _, ttl := range ttls {
							if ttl <= 0 || ttl > 5000 {
								return false
							}
						}
						return all(vals, meta)
					})
					if got := inspectMeta(t, c, key, l.Token()); !all(got, meta) {
						t.Errorf("Inspect of %s shows metadata %q", key, got)
					}
				}
				if err := l.Extend(ctx, 20*time.Second); err != nil {
					t.Fatal(err)
				}
				for _, key := range multiMetaKeys {
					eventually(t, "metadata of "+key+" not kept alive by the extension", func() bool {
						vals, ttls := rs.metaOn(t, key, l.Token())
						for _, ttl := range ttls {
							if ttl <= 15000 {
								return false
							}
						}
						return all(vals, meta)
					})
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				leftover.None(t, rs.servers)
			})
		}
	})
}

// A multi-key attempt that a minority granted is rolled back there with
// the metadata of every key: once the key that refused it is gone, the
// masters hold nothing.
func TestMultiMeta_rollbackLeavesNoMetadata(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		ctx := ctxT(t)
		for _, s := range rs.servers[1:] {
			if _, err := s.Do("SET", multiMetaKeys[2], "someone-else", "PX", 60000); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.TryAcquireMulti(ctx, multiMetaKeys, redlock.WithMetadata("host=b")); err == nil {
			t.Fatal("acquired against a majority")
		}
		for _, s := range rs.servers[1:] {
			if _, err := s.Do("DEL", multiMetaKeys[2]); err != nil {
				t.Fatal(err)
			}
		}
		leftover.None(t, rs.servers)
	})
}
