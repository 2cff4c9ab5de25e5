package scripts_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// A hold id the master holds is untrusted: whatever the field "" of an
// owner's hash holds (not a number, a huge number, a name with ":" in it,
// empty), the owner's commands with another id neither fail with a script
// error nor change the hold, and an acquisition takes it over only when
// it is an older attempt of the same name.
func TestReentrant_hostileHoldIDIsRefusedOrTakenOverCleanly(t *testing.T) {
	srv := redistest.StartOne(t)
	huge := strings.Repeat("9", 400)
	for _, tc := range []struct {
		held, attempt string
		takeOver      bool
	}{
		{"", "h:2", false},
		{"garbage", "h:2", false},
		{"h:", "h:2", false},
		{"h:-1", "h:2", false},
		{"h:1.5", "h:2", false},
		{"h: 1", "h:2", false},
		{"h:0x1", "h:2", false},
		{":1", "h:2", false},
		{":1", ":2", true},
		{"h:" + huge, "h:2", false},
		{"h:" + huge, "h:" + huge + "9", false}, // both beyond a float: not older
		{"h:1", "h:" + huge, true},
		// Beyond 2^53 two numbers may round to one float: never taken over.
		{"h:18446744073709551614", "h:18446744073709551615", false},
		{"h:x:1", "h:2", false},
		{"h:x:1", "h:x:2", true},
		{"h:1\n", "h:2", false},
	} {
		c := conn(t, srv)
		if _, err := c.Do("DEL", "re"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Do("HSET", "re", "o", "3", "", tc.held); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Do("PEXPIRE", "re", 30000); err != nil {
			t.Fatal(err)
		}
		// The commands of another hold find another id: nothing changes.
		for _, args := range [][]any{reExtend("o", tc.attempt), reRelease("o", tc.attempt, 1),
			reRelease("o", tc.attempt, 0), reRollback("o", tc.attempt)} {
			if n := reentrantRun(t, c, scripts.Reentrant, args...); n != 0 {
				t.Errorf("hold %q: %v answered %d, want 0", tc.held, args, n)
			}
		}
		if count, id := reHold(t, c, "o"); count != "3" || id != tc.held {
			t.Errorf("hold %q: commands of %q left count %q id %q", tc.held, tc.attempt, count, id)
		}
		got := reentrantRun(t, c, scripts.Reentrant, reAcquire("o", tc.attempt, 1)...)
		wantID, wantCount, want := tc.held, "3", 0
		if tc.takeOver {
			wantID, wantCount, want = tc.attempt, "1", 1
		}
		if count, id := reHold(t, c, "o"); got != want || count != wantCount || id != wantID {
			t.Errorf("hold %q, attempt %q: %d, count %q id %q; want %d, count %q id %q",
				tc.held, tc.attempt, got, count, id, want, wantCount, wantID)
		}
		// Another owner is refused either way.
		if n := reentrantRun(t, c, scripts.Reentrant, reAcquire("p", "g:1", 1)...); n != 0 {
			t.Errorf("hold %q: another owner was granted the key", tc.held)
		}
	}
}

// A hash that holds a hold id but no owner (not written by any client)
// refuses every owner, with or without an id, and is left as it is; the
// owner "" (never sent: NewReentrant draws one) is not taken for that id.
func TestReentrant_holdIDWithoutOwnerRefusesEveryone(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	if _, err := c.Do("HSET", "re", "", "h:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("PEXPIRE", "re", 30000); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]any{reAcquire("o", "h:2", 1), reAcquire("o", "", 1), {"re", "acquire", "o", 30000, 1},
		reExtend("o", "h:1"), reRelease("o", "h:1", 0), {"re", "release", "o", 0, "", ""}} {
		if n := reentrantRun(t, c, scripts.Reentrant, args...); n != 0 {
			t.Errorf("%v answered %d on a hash with a hold id and no owner, want 0", args, n)
		}
		if n := reentrantRun(t, c, scripts.PreviousReentrant, args[:min(len(args), 5)]...); n != 0 && args[1] != "release" {
			t.Errorf("previous script: %v answered %d, want 0", args, n)
		}
	}
	if v, err := redis.StringMap(c.Do("HGETALL", "re")); err != nil || len(v) != 1 || v[""] != "h:1" {
		t.Errorf("the hash after every owner's commands: %v, %v", v, err)
	}
}

// Kinds must not be mixed on one key (docs/kinds.md), but a read-write
// lock's script that meets a reentrant lock's hash must still leave that
// hold alone, as reentrant.lua leaves a read-write hash: refused with an
// error that names the other kind (ErrWrongKind), the owner's field and
// hold id unchanged.
func TestReentrant_readWriteScriptLeavesReentrantHold(t *testing.T) {
	srv := redistest.StartOne(t)
	for _, op := range [][]any{{"re", "read", "r1", 30000, 0, ""}, {"re", "write", "w1", 30000, 300, "W"}} {
		c := conn(t, srv)
		if _, err := c.Do("DEL", "re"); err != nil {
			t.Fatal(err)
		}
		reentrantRun(t, c, scripts.Reentrant, reAcquire("o", "h:1", 2)...)
		n, err := redis.Int(redigot.Do(scripts.RW, c, timeout, op...))
		if err != nil {
			err = scripts.Explain(err, err.Error())
		}
		if !errors.Is(err, scripts.ErrWrongKind) {
			t.Errorf("rw %s on a reentrant hold answered %d, %v; want an error matching ErrWrongKind", op[1], n, err)
		}
		if count, id := reHold(t, c, "o"); count != "2" || id != "h:1" {
			t.Errorf("rw %s on a reentrant hold (%d, %v) left count %q id %q, want 2 and h:1", op[1], n, err, count, id)
		}
	}
}
