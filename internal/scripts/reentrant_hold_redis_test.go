package scripts_test

import (
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// reentrantRun runs script (reentrant.lua, or its previous version) on c
// and returns its reply.
func reentrantRun(t *testing.T, c redis.Conn, script *scripts.Script, args ...any) int {
	t.Helper()
	n, err := redis.Int(redigot.Do(script, c, timeout, args...))
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return n
}

// The commands a client of this version sends for a reentrant hold with
// id: the hold's id is the last argument of each.
func reAcquire(owner, id string, count int) []any {
	return []any{"re", "acquire", owner, 30000, count, id}
}

func reRelease(owner, id string, count int) []any {
	return []any{"re", "release", owner, count, "ch", "rel-" + id, id}
}

func reRollback(owner, id string) []any {
	return []any{"re", "release", owner, 0, "", "", id}
}

func reExtend(owner, id string) []any { return []any{"re", "extend", owner, 5000, id} }

// The owner's hold on the master: its count ("" when the owner holds
// nothing), and its id.
func reHold(t *testing.T, c redis.Conn, owner string) (count, id string) {
	t.Helper()
	count, _ = redis.String(c.Do("HGET", "re", owner))
	id, _ = redis.String(c.Do("HGET", "re", ""))
	return count, id
}

// A reentrant owner's command of an older hold or attempt, which a master
// runs late — after the same owner's next attempt there, as a master that
// was frozen and reads its connections in another order may — neither
// deletes nor changes the newer hold: where the newer attempt was granted,
// the owner still holds it afterwards with its own id and count.
func TestReentrant_ownersOlderCommandLeavesNewerHold(t *testing.T) {
	srv := redistest.StartOne(t)
	cases := []struct {
		name string
		// before runs on the master before the newer attempt (the older
		// hold's life so far); late runs after it.
		before, late [][]any
	}{
		{"release after the older hold ended", [][]any{reAcquire("o", "h:1", 1), reRelease("o", "h:1", 0)},
			[][]any{reRelease("o", "h:1", 0)}},
		{"release of the older hold still there", [][]any{reAcquire("o", "h:1", 1)},
			[][]any{reRelease("o", "h:1", 0)}},
		{"rollback after the older attempt was rolled back", [][]any{reAcquire("o", "h:1", 1), reRollback("o", "h:1")},
			[][]any{reRollback("o", "h:1")}},
		{"rollback of the older attempt still there", [][]any{reAcquire("o", "h:1", 1)},
			[][]any{reRollback("o", "h:1")}},
		{"count given back, then the last release", [][]any{reAcquire("o", "h:1", 1), reAcquire("o", "h:1", 2),
			reRelease("o", "h:1", 1), reRelease("o", "h:1", 0)}, [][]any{reRelease("o", "h:1", 1), reRelease("o", "h:1", 0)}},
		{"re-entry, extension and release of the older hold", [][]any{reAcquire("o", "h:1", 1), reRelease("o", "h:1", 0)},
			[][]any{reAcquire("o", "h:1", 2), reExtend("o", "h:1"), reRelease("o", "h:1", 0)}},
		{"the older attempt's acquisition and rollback", nil,
			[][]any{reAcquire("o", "h:1", 1), reRollback("o", "h:1")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := conn(t, srv)
			if _, err := c.Do("DEL", "re"); err != nil {
				t.Fatal(err)
			}
			for _, args := range tc.before {
				reentrantRun(t, c, scripts.Reentrant, args...)
			}
			granted := reentrantRun(t, c, scripts.Reentrant, reAcquire("o", "h:2", 1)...) == 1
			for _, args := range tc.late {
				reentrantRun(t, c, scripts.Reentrant, args...)
			}
			count, id := reHold(t, c, "o")
			if !granted {
				t.Fatalf("the newer attempt of the same Reentrant was refused")
			}
			if count != "1" || id != "h:2" {
				t.Fatalf("the newer hold granted here: count %q id %q after the older commands, want 1 and h:2", count, id)
			}
		})
	}
}

// A hold id is "<name>:<n>": an attempt takes over an older hold of its
// own Reentrant (same name, smaller n) that a master still has, and is
// refused a newer one of the same name, or a hold of another Reentrant
// with the same owner, as another owner would be.
func TestReentrant_attemptTakesOverOnlyItsOwnOlderHold(t *testing.T) {
	srv := redistest.StartOne(t)
	for _, tc := range []struct {
		held, attempt string
		want          int
	}{
		{"h:1", "h:2", 1},
		{"h:9", "h:10", 1},
		{"h:2", "h:1", 0},
		{"h:2", "h:2", 1},
		{"g:1", "h:2", 0},
		{"h:1", "hh:2", 0},
		{"h1", "h:2", 0},
		{"h:1", "x", 0},
	} {
		c := conn(t, srv)
		if _, err := c.Do("DEL", "re"); err != nil {
			t.Fatal(err)
		}
		reentrantRun(t, c, scripts.Reentrant, reAcquire("o", tc.held, 1)...)
		got := reentrantRun(t, c, scripts.Reentrant, reAcquire("o", tc.attempt, 1)...)
		want := tc.held
		if tc.want == 1 {
			want = tc.attempt
		}
		if _, id := reHold(t, c, "o"); got != tc.want || id != want {
			t.Errorf("hold %s, attempt %s: %d and the hold %s, want %d and %s", tc.held, tc.attempt, got, id, tc.want, want)
		}
	}
}
