package main

import (
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Keys and what masters hold can carry terminal escape sequences, tabs
// and newlines: status prints them escaped, so they neither act on the
// terminal nor shift its table.
func TestStatus_escapesWhatItPrints(t *testing.T) {
	srv := redistest.StartOne(t)
	const key, token = "\x1b[2Jjob", "\x1b]0;pwned\a\ttok"
	if _, err := srv.Do("SET", key, token, "PX", 60000); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("HSET", "nested", "own\ner\x1b[31m", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("RPUSH", "list\r", "x"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := redlockRun(t, []string{srv.Addr()}, "status", key, "nested", "list\r")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.ContainsAny(out, "\x1b\a\r") {
		t.Fatalf("status prints control characters raw:\n%q", out)
	}
	for _, want := range []string{`"\x1b[2Jjob"`, `"\x1b]0;pwne"…`, `"own\ner\x1b[31m"×2`, `"list\r"`} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %s:\n%s", want, out)
		}
	}
	if rows := strings.Count(out, "\n  "+srv.Addr()+"  "); rows != 3 {
		t.Errorf("%d rows for 3 keys: a newline from the master broke one:\n%s", rows, out)
	}
}
