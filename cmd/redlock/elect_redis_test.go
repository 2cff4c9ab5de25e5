package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// elect runs the command only while leader, with the term in its
// environment; leader names it meanwhile (plain and --json), and none
// once it exited; a second candidate takes over at once when the first
// resigns, with a higher term.
func TestElect_runsWhileLeaderAndLeaderNamesIt(t *testing.T) {
	for _, n := range []int{1, 3} {
		masters := addrsOf(redistest.Start(t, n))
		if code, out, _ := redlockRun(t, masters, "leader", "svc"); code != exitNotAcquired || !strings.Contains(out, "no leader") {
			t.Fatalf("N=%d: leader before any: %d %q", n, code, out)
		}
		dir := t.TempDir()
		first, release := filepath.Join(dir, "first"), filepath.Join(dir, "release")
		done := make(chan [3]string, 1)
		go func() {
			code, out, errOut := redlockRun(t, masters, "elect", "--value", "node-a", "svc", "--",
				"sh", "-c", `echo "$QUORUMLOCK_VALUE $QUORUMLOCK_TERM" > `+first+`; while [ ! -e `+release+` ]; do sleep 0.02; done`)
			done <- [3]string{string(rune('0' + code)), out, errOut}
		}()
		waitFor(t, func() bool { b, _ := os.ReadFile(first); return len(b) > 0 })
		b, _ := os.ReadFile(first)
		if !regexp.MustCompile(`^node-a [1-9][0-9]*\n$`).Match(b) {
			t.Fatalf("N=%d: the command saw %q", n, b)
		}
		code, out, errOut := redlockRun(t, masters, "leader", "svc")
		if code != 0 || !regexp.MustCompile(`^leader of svc: node-a \(term [1-9][0-9]*, expires in .*\)\n$`).MatchString(out) {
			t.Fatalf("N=%d: leader: %d %q %s", n, code, out, errOut)
		}
		code, out, _ = redlockRun(t, masters, "leader", "--json", "svc")
		var j struct {
			Value string `json:"value"`
			Term  uint64 `json:"term"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &j) != nil || j.Value != "node-a" || j.Term == 0 {
			t.Fatalf("N=%d: leader --json: %d %q", n, code, out)
		}
		// A second candidate waits; the first's command ends, it resigns,
		// and the second is elected at once with a higher term.
		second := make(chan string, 1)
		go func() {
			// stdout only: under load the final resign may time out and
			// say so on stderr, which is not what this test is about.
			_, out, _ := redlockRun(t, masters, "elect", "--value", "node-b", "--ttl", "30s", "svc", "--", "sh", "-c", `echo "$QUORUMLOCK_TERM"`)
			second <- out
		}()
		time.Sleep(200 * time.Millisecond) // the subject: the second candidate must not run for a while
		select {
		case out := <-second:
			t.Fatalf("N=%d: the second candidate ran while the first led: %q", n, out)
		default:
		}
		if err := os.WriteFile(release, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if r := <-done; r[0] != "0" {
			t.Fatalf("N=%d: first elect exit %q: %s", n, r[0], r[2])
		}
		start := time.Now()
		out2 := <-second
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("N=%d: hand-over took %v", n, d)
		}
		t1, err1 := strconv.ParseUint(strings.TrimSpace(string(b[len("node-a "):])), 10, 64)
		t2, err2 := strconv.ParseUint(strings.TrimSpace(out2), 10, 64)
		if err1 != nil || err2 != nil || t2 <= t1 {
			t.Fatalf("N=%d: second term %q after %q", n, out2, b)
		}
	}
}
