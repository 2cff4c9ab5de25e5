package scripts

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
)

// multiMetaClient runs a multi-key lock's wrapped script, as a client of
// one version sends it, on one master.
type multiMetaClient struct {
	t      *testing.T
	c      redis.Conn
	script *Script
	// perKey: the metadata hash of every key follows the lock keys (this
	// version); else one hash, the first key's (the previous one).
	perKey bool
}

// run sends op for token on keys with metadata meta doing what; it
// returns the script's reply.
func (m multiMetaClient) run(keys []string, op, tok, third, what, meta string) int {
	m.t.Helper()
	args := make([]any, 0, 2*len(keys)+6)
	for _, k := range keys {
		args = append(args, k)
	}
	metaKeys := keys[:1]
	if m.perKey {
		metaKeys = keys
	}
	for _, k := range metaKeys {
		args = append(args, layout.MetaKey(k))
	}
	args = append(args, op, tok, third, what, tok, meta)
	n, err := redis.Int(redis.DoWithTimeout(m.c, 2*time.Second, "EVAL", append([]any{m.script.Source(), len(keys) + len(metaKeys)}, args...)...))
	if err != nil {
		m.t.Fatalf("%s %v: %v", op, keys, err)
	}
	return n
}

func (m multiMetaClient) acquire(keys []string, tok, meta string) int {
	return m.run(keys, "acquire", tok, "30000", MetaSet, meta)
}

func (m multiMetaClient) release(keys []string, tok string) int {
	return m.run(keys, "release", tok, "", MetaDrop, "")
}

// dialOne starts a master and returns a connection to it, closed with t.
func dialOne(t *testing.T) redis.Conn {
	t.Helper()
	c, err := redis.Dial("tcp", redistest.StartOne(t).Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// keysOn lists every key on the master.
func keysOn(t *testing.T, c redis.Conn) []string {
	t.Helper()
	ks, err := redis.Strings(c.Do("KEYS", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// A multi-key lock with metadata keeps it with each key: every key's hash
// names the holder, each with its own key's TTL, also after an extension
// and whoever holds the keys next; a refused attempt writes nothing, and
// the release or rollback leaves nothing behind.
func TestMultiWithMeta_everyKeyNamesItsHolder(t *testing.T) {
	c := dialOne(t)
	now := multiMetaClient{t: t, c: c, script: Multi.WithMeta(), perKey: true}
	ks := []string{"{m}:a", "{m}:b", "{m}:c"}
	if now.acquire(ks, "tok", "host=a") != 1 {
		t.Fatal("refused with every key free")
	}
	check := func(minTTL int64) {
		t.Helper()
		for _, k := range ks {
			v, err := redis.String(c.Do("HGET", layout.MetaKey(k), "tok"))
			if err != nil || v != "host=a" {
				t.Errorf("%s's metadata: %q, %v", k, v, err)
			}
			key, _ := redis.Int64(c.Do("PTTL", k)) // first: both run down
			// The script gives the hash what the key has left (PTTL, then
			// PEXPIRE): where the master's clock ticked between the two,
			// the hash ends a millisecond or so after the key.
			if ttl, _ := redis.Int64(c.Do("PTTL", layout.MetaKey(k))); ttl < minTTL || ttl > key+2 {
				t.Errorf("%s's metadata: PTTL %d, the key's %d", k, ttl, key)
			}
		}
	}
	check(1)
	if now.run(ks, "extend", "tok", "60000", MetaKeep, "host=a") != 1 {
		t.Fatal("extend refused")
	}
	check(30001)
	if now.acquire([]string{"{m}:c", "{m}:d"}, "other", "host=b") != 0 {
		t.Fatal("acquired a held key")
	}
	if now.release(ks, "tok") != 1 {
		t.Fatal("release refused")
	}
	if left := keysOn(t, c); len(left) != 0 {
		t.Errorf("left after the release: %q", left)
	}
	// A rollback is a release that announces nothing.
	now.acquire(ks, "tok2", "host=c")
	if now.run(ks, "release", "tok2", "", MetaDrop, "") != 1 {
		t.Fatal("rollback refused")
	}
	if left := keysOn(t, c); len(left) != 0 {
		t.Errorf("left after the rollback: %q", left)
	}
}

// During a rolling upgrade, clients of the previous version (the metadata
// under the first key only) and of this one lock the same keys: each is
// refused a key the other holds and writes nothing then, each one's
// release leaves nothing behind, and neither touches the other's
// metadata field.
func TestMultiWithMeta_previousVersionOnTheSameKeys(t *testing.T) {
	c := dialOne(t)
	previous := multiMetaClient{t: t, c: c, script: PreviousMultiWithMeta}
	now := multiMetaClient{t: t, c: c, script: Multi.WithMeta(), perKey: true}
	for _, first := range []multiMetaClient{previous, now} {
		second := now
		if first.perKey {
			second = previous
		}
		t.Run(fmt.Sprintf("first per key %v", first.perKey), func(t *testing.T) {
			first.t, second.t = t, t
			if first.acquire([]string{"{m}:a", "{m}:b"}, "one", "host=1") != 1 {
				t.Fatal("refused with every key free")
			}
			if second.acquire([]string{"{m}:b", "{m}:c"}, "two", "host=2") != 0 {
				t.Fatal("the other version took a held key")
			}
			if n, _ := redis.Int(c.Do("EXISTS", "{m}:c", layout.MetaKey("{m}:c"))); n != 0 {
				t.Error("a refused attempt wrote")
			}
			if v, _ := redis.String(c.Do("HGET", layout.MetaKey("{m}:a"), "one")); v != "host=1" {
				t.Errorf("the holder's metadata: %q", v)
			}
			if n, _ := redis.Int(c.Do("HEXISTS", layout.MetaKey("{m}:b"), "two")); n != 0 {
				t.Error("a refused attempt left its metadata")
			}
			if second.release([]string{"{m}:b", "{m}:c"}, "two") != 0 || first.release([]string{"{m}:a", "{m}:b"}, "one") != 1 {
				t.Fatal("releases")
			}
			if left := keysOn(t, c); len(left) != 0 {
				t.Errorf("left after the releases: %q", left)
			}
			if second.acquire([]string{"{m}:b", "{m}:c"}, "two", "host=2") != 1 || second.release([]string{"{m}:b", "{m}:c"}, "two") != 1 {
				t.Fatal("the other version could not lock the keys once free")
			}
			if left := keysOn(t, c); len(left) != 0 {
				t.Errorf("left after the other version's release: %q", left)
			}
		})
	}
}
