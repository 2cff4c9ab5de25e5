package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/handover"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redigo"
)

// elect: a deposed leader's command is stopped and redlock exits 76; a
// command's own exit code is passed on and the leadership resigned, with
// nothing left on the masters but the fencing counter; a too long --value
// is refused with exit 64 before anything is sent.
func TestElect_lossExitCodesAndCleanup(t *testing.T) {
	servers := redistest.Start(t, 3)
	masters := addrsOf(servers)

	pidFile := filepath.Join(t.TempDir(), "pid")
	done := make(chan [2]any, 1)
	go func() {
		code, _, errOut := redlockRun(t, masters, "elect", "--value", "node-a", "--ttl", "1500ms", "--grace", "300ms", "svc", "--",
			"sh", "-c", "echo $$ > "+pidFile+"; sleep 30")
		done <- [2]any{code, errOut}
	}()
	waitFor(t, func() bool { b, _ := os.ReadFile(pidFile); return len(b) > 0 })
	for _, s := range servers {
		if _, err := s.Do("DEL", "svc"); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case r := <-done:
		if r[0].(int) != exitLost {
			t.Fatalf("deposed: exit %v, want %d; stderr: %s", r[0], exitLost, r[1])
		}
		if !strings.Contains(r[1].(string), "leadership") {
			t.Errorf("stderr: %s", r[1])
		}
	case <-time.After(20 * time.Second):
		t.Fatal("redlock elect did not end after leadership was lost")
	}
	b, _ := os.ReadFile(pidFile)
	if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid == 0 || processAlive(pid) {
		t.Errorf("the deposed leader's command (pid %d) is still running", pid)
	}
	leftover.None(t, servers)

	code, _, errOut := redlockRun(t, masters, "elect", "--value", "node-b", "svc", "--", "sh", "-c", "exit 3")
	if code != 3 {
		t.Fatalf("command exit 3: redlock exit %d; %s", code, errOut)
	}
	leftover.None(t, servers)

	code, _, errOut = redlockRun(t, masters, "elect", "--value", strings.Repeat("x", layout.MaxMeta+1), "other", "--", "true")
	if code != exitUsage || !strings.Contains(errOut, "metadata") {
		t.Fatalf("too long --value: exit %d; %s", code, errOut)
	}
	leftover.None(t, servers)
}

// leader --json: null and 75 without a leader; value, term and a positive
// ttl_ms with one, as valid JSON even for a value that is not UTF-8; the
// plain output escapes control bytes.
func TestLeader_JSONOutput(t *testing.T) {
	servers := redistest.Start(t, 3)
	masters := addrsOf(servers)
	code, out, _ := redlockRun(t, masters, "leader", "--json", "svc")
	if code != exitNotAcquired || out != "null\n" {
		t.Fatalf("no leader: %d %q", code, out)
	}
	started := filepath.Join(t.TempDir(), "started")
	release := filepath.Join(t.TempDir(), "release")
	done := make(chan int, 1)
	go func() {
		code, _, _ := redlockRun(t, masters, "elect", "--value", "a\x1b[2Jb\xff", "svc", "--",
			"sh", "-c", "touch "+started+"; while [ ! -e "+release+" ]; do sleep 0.02; done")
		done <- code
	}()
	waitFor(t, func() bool { _, err := os.Stat(started); return err == nil })
	code, out, errOut := redlockRun(t, masters, "leader", "--json", "svc")
	var j map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &j) != nil {
		t.Fatalf("leader --json: %d %q %s", code, out, errOut)
	}
	if len(j) != 3 || j["term"].(float64) < 1 || j["ttl_ms"].(float64) <= 0 || !strings.HasPrefix(j["value"].(string), "a\x1b[2Jb") {
		t.Errorf("leader --json: %q", out)
	}
	code, out, _ = redlockRun(t, masters, "leader", "svc")
	if code != 0 || strings.Contains(out, "\x1b") {
		t.Errorf("leader: %d %q (control bytes must be escaped)", code, out)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if c := <-done; c != 0 {
		t.Fatalf("elect exit %d", c)
	}
}

// Election from the shell: while candidates hand over again and again,
// every answer of `redlock leader --json` is a leader's real (value, term)
// pair, or null (between leaders, or a hand-over in progress).
func TestLeader_CLIPairsDuringHandOver(t *testing.T) {
	servers := redistest.Start(t, 3)
	masters := addrsOf(servers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	candidates := make([]*election.Election, 3)
	for i := range candidates {
		c, err := redigo.NewFromAddrs(masters)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if candidates[i], err = election.New(c, "svc", election.WithTTL(2*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	type answer struct {
		Value string `json:"value"`
		Term  uint64 `json:"term"`
	}
	var answers []handover.Read
	var terms *handover.Terms
	campaigning := make(chan struct{})
	go func() { terms = handover.Run(ctx, t, candidates, 10, 10*time.Millisecond); close(campaigning) }()
	for running := true; running; {
		select {
		case <-campaigning:
			running = false
		default:
		}
		code, out, errOut := redlockRun(t, masters, "leader", "--json", "svc")
		switch {
		case code == exitNotAcquired && strings.TrimSpace(out) == "null":
		case code == exitOK:
			var a answer
			if err := json.Unmarshal([]byte(out), &a); err != nil {
				t.Errorf("leader --json: %q: %v", out, err)
				cancel() // the campaigns end; they are waited for below
				running = false
			} else {
				answers = append(answers, handover.Read{Value: a.Value, Term: a.Term})
			}
		default:
			t.Errorf("leader --json: exit %d, %q, %s", code, out, errOut)
			cancel()
			running = false
		}
	}
	<-campaigning
	// Each answer comes from a new client: terms are checked as pairs,
	// not for their order.
	handover.Check(t, answers, terms, false)
	t.Logf("%d answers with a leader", len(answers))
	if len(answers) == 0 {
		t.Error("redlock leader never named a leader")
	}
}
