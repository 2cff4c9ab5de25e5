package scripts_test

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// The seed's redis-cli transcript of a reentrant lock, replayed on the
// reentrant script: three holds give count 3; another owner's release
// changes nothing; the owner's releases count down and the last deletes.
func TestReentrant_seedTranscript(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	run := func(args ...any) int {
		t.Helper()
		n, err := redis.Int(redigot.Do(scripts.Reentrant, c, timeout, args...))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	count := func() string {
		v, _ := redis.String(c.Do("HGET", "lock", "owner-1"))
		return v
	}
	for i := 1; i <= 3; i++ {
		if run("lock", "acquire", "owner-1", 30000, i) != 1 {
			t.Fatalf("hold %d refused", i)
		}
	}
	if count() != "3" {
		t.Fatalf("after three holds the count is %q, want 3", count())
	}
	if run("lock", "acquire", "owner-2", 30000, 1) != 0 {
		t.Fatal("another owner took a held lock")
	}
	if run("lock", "release", "owner-2", 0, "ch") != 0 || count() != "3" {
		t.Fatalf("a foreign release was accepted or changed the count (%q)", count())
	}
	if run("lock", "release", "owner-1", 2, "ch") != 1 || count() != "2" {
		t.Fatalf("first release: count %q, want 2", count())
	}
	if run("lock", "release", "owner-1", 1, "ch") != 1 || count() != "1" {
		t.Fatalf("second release: count %q, want 1", count())
	}
	if run("lock", "release", "owner-1", 0, "ch") != 1 {
		t.Fatal("third release refused")
	}
	if n, _ := redis.Int(c.Do("EXISTS", "lock")); n != 0 {
		t.Fatal("the last release did not delete the lock")
	}
	if run("lock", "extend", "owner-1", 5000) != 0 {
		t.Fatal("extend of a released lock succeeded")
	}
}

func rw(t *testing.T, c redis.Conn, args ...any) int {
	t.Helper()
	n, err := redis.Int(redigot.Do(scripts.RW, c, timeout, args...))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRW_readersWriterAndOwnEntries(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	if rw(t, c, "k", "read", "r1", 30000) != 1 || rw(t, c, "k", "read", "r2", 30000) != 1 {
		t.Fatal("two readers could not share the lock")
	}
	if rw(t, c, "k", "write", "w1", 30000, 500, "writer-1") != 0 {
		t.Fatal("a writer got in beside readers")
	}
	// The writer's intent now turns new readers away.
	if rw(t, c, "k", "read", "r3", 30000) != 2 {
		t.Fatal("a new reader got in past a waiting writer, or was not told that one waits")
	}
	// A reader can release only its own entry.
	if rw(t, c, "k", "release-read", "r9", "") != 0 {
		t.Fatal("a release of an entry that does not exist succeeded")
	}
	if rw(t, c, "k", "release-read", "r1", "") != 1 || rw(t, c, "k", "extend-read", "r2", 30000) != 1 {
		t.Fatal("reader 1 could not release, or reader 2 could not extend")
	}
	if rw(t, c, "k", "write", "w1", 30000, 500, "writer-1") != 0 {
		t.Fatal("the writer got in while reader 2 holds")
	}
	if rw(t, c, "k", "release-read", "r2", "") != 1 {
		t.Fatal("reader 2 could not release")
	}
	// Another writer cannot jump the intent.
	if rw(t, c, "k", "write", "w2", 30000, 500, "writer-2") != 0 {
		t.Fatal("a second writer jumped the first one's intent")
	}
	if rw(t, c, "k", "write", "w1", 30000, 500, "writer-1") != 1 {
		t.Fatal("the waiting writer did not get the free lock")
	}
	if n, _ := redis.Int(c.Do("HEXISTS", "k", keys.IntentField)); n != 0 {
		t.Fatal("the intent outlived the writer's acquisition")
	}
	if rw(t, c, "k", "read", "r4", 30000) != 0 || rw(t, c, "k", "extend-write", "w1", 30000) != 1 {
		t.Fatal("a reader got in beside the writer, or the writer could not extend")
	}
	if rw(t, c, "k", "release-write", "w1", "") != 1 {
		t.Fatal("the writer could not release")
	}
	if n, _ := redis.Int(c.Do("EXISTS", "k")); n != 0 {
		t.Fatal("the empty lock was not deleted")
	}
}

func TestRW_expiriesAreBounded(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	// A reader that crashed blocks writers only until its TTL.
	if rw(t, c, "k", "read", "r1", 150) != 1 {
		t.Fatal("read refused")
	}
	if ttl, _ := redis.Int64(c.Do("PTTL", "k")); ttl <= 0 || ttl > 150 {
		t.Fatalf("hash PTTL = %d, want the reader's expiry", ttl)
	}
	time.Sleep(200 * time.Millisecond) // the subject: the reader's 150 ms expiry passes
	if rw(t, c, "k", "write", "w1", 30000, 500, "writer-1") != 1 {
		t.Fatal("an expired reader still blocks the writer")
	}
	if rw(t, c, "k", "release-write", "w1", "") != 1 {
		t.Fatal("release refused")
	}
	// A writer that vanished after leaving its intent blocks readers
	// only until the intent expires.
	if rw(t, c, "k", "read", "r2", 30000) != 1 || rw(t, c, "k", "write", "w2", 30000, 150, "writer-2") != 0 {
		t.Fatal("setup")
	}
	if rw(t, c, "k", "read", "r3", 30000) != 2 {
		t.Fatal("the intent did not turn a reader away, saying so")
	}
	time.Sleep(200 * time.Millisecond) // the subject: the intent's 150 ms expiry passes
	if rw(t, c, "k", "read", "r3", 30000) != 1 {
		t.Fatal("an expired intent still blocks readers")
	}
	// A writer that gives up takes its intent back at once.
	if rw(t, c, "k", "write", "w3", 30000, 30000, "writer-3") != 0 || rw(t, c, "k", "leave", "writer-3") != 1 {
		t.Fatal("leave refused")
	}
	if rw(t, c, "k", "read", "r4", 30000) != 1 {
		t.Fatal("a withdrawn intent still blocks readers")
	}
}

func TestMulti_allOrNothing(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	multi := func(keys []any, args ...any) int {
		t.Helper()
		n, err := redis.Int(redigot.DoKeys(scripts.Multi, c, timeout, len(keys), append(keys, args...)...))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := c.Do("SET", "b", "other"); err != nil {
		t.Fatal(err)
	}
	if multi([]any{"a", "b", "c"}, "acquire", "tok", 30000) != 0 {
		t.Fatal("acquired with b held")
	}
	if n, _ := redis.Int(c.Do("EXISTS", "a", "c")); n != 0 {
		t.Fatal("a refused multi-key acquisition set some keys")
	}
	if _, err := c.Do("DEL", "b"); err != nil {
		t.Fatal(err)
	}
	if multi([]any{"a", "b", "c"}, "acquire", "tok", 30000) != 1 {
		t.Fatal("refused with every key free")
	}
	if multi([]any{"a", "b", "c"}, "extend", "other", 30000) != 0 || multi([]any{"a", "b", "c"}, "extend", "tok", 60000) != 1 {
		t.Fatal("extend")
	}
	if ttl, _ := redis.Int64(c.Do("PTTL", "c")); ttl <= 30000 {
		t.Fatalf("extend did not reach every key: PTTL c = %d", ttl)
	}
	if multi([]any{"a", "b", "c"}, "release", "tok", "") != 1 {
		t.Fatal("release refused")
	}
	if n, _ := redis.Int(c.Do("EXISTS", "a", "b", "c")); n != 0 {
		t.Fatal("release left keys")
	}
}
