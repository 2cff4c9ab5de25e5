package redlock

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// A reentrant owner's last release or rollback of an older hold, run late
// on a master after the owner's newer attempt there, leaves the newer
// hold and its holder metadata (one field per owner, which both holds
// share): what Inspect shows of the newer hold is still there. A last
// release that ends the hold takes the metadata with it.
func TestMeta_reentrantOlderReleaseLeavesNewerHoldsMetadata(t *testing.T) {
	srv := redistest.StartOne(t)
	c, err := redis.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hold := func(id, meta string) kind {
		return &metaKind{kind: &reentrantKind{owner: "O", count: 1, hold: id}, meta: &holderMeta{key: "k:meta", value: meta}}
	}
	run := func(k kind, op opKind) int {
		t.Helper()
		r := &round{key: "k", token: "O", ttlMS: 30000, k: k}
		script, _, args := r.command(op, nil)
		n, err := redis.Int(redigot.Do(script, c, 2*time.Second, args...))
		if err != nil {
			t.Fatalf("%v: %v", op, err)
		}
		return n
	}
	older, newer := hold("h:1", "old"), hold("h:2", "new")
	for _, tc := range []struct {
		name string
		late kind
		op   opKind
	}{
		{"last release", older.forRelease(), opRelease},
		{"rollback", older, opRollback},
	} {
		if _, err := c.Do("DEL", "k", "k:meta"); err != nil {
			t.Fatal(err)
		}
		run(older, opAcquire)
		if run(newer, opAcquire) != 1 {
			t.Fatalf("%s: the newer attempt was refused", tc.name)
		}
		if n := run(tc.late, tc.op); n != 0 {
			t.Fatalf("%s of the older hold answered %d", tc.name, n)
		}
		if v, err := redis.String(c.Do("HGET", "k:meta", "O")); v != "new" {
			t.Errorf("the newer hold's metadata after the older hold's %s: %q, %v; want \"new\"", tc.name, v, err)
		}
		if run(newer.forRelease(), opRelease) != 1 {
			t.Fatalf("the newer hold's release was refused")
		}
		if n, err := redis.Int(c.Do("EXISTS", "k", "k:meta")); n != 0 || err != nil {
			t.Errorf("after the newer hold's release: %d keys left, %v", n, err)
		}
	}
}
