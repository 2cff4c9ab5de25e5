package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func TestExecPermits_runsWhileOneOfKIsFreeAndStatusShowsHolders(t *testing.T) {
	masters := addrsOf(redistest.Start(t, 3))
	holder, err := redigo.NewFromAddrs(masters, redlock.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx := context.Background()
	s, err := holder.NewSemaphore("encode", 2, redlock.WithTTL(time.Minute), redlock.WithMetadata("host=worker-7"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)

	code, out, errOut := redlockRun(t, masters, "status", "--permits", "2", "encode")
	if code != exitOK || !strings.Contains(out, "semaphore encode: 2 of 2 permits held") ||
		strings.Count(out, `"host=worker-7"`) < 2 {
		t.Fatalf("status: exit %d:\n%s%s", code, out, errOut)
	}
	code, out, errOut = redlockRun(t, masters, "status", "--json", "--permits", "2", "encode")
	var st struct {
		Semaphores []statusSemaphore `json:"semaphores"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != exitOK || err != nil || len(st.Semaphores) != 1 ||
		st.Semaphores[0].Held != 2 || st.Semaphores[0].Holders[a.Slot()] != a.Token() {
		t.Fatalf("status --json: exit %d, %v: %s%s", code, err, out, errOut)
	}

	marker := filepath.Join(t.TempDir(), "ran")
	code, _, errOut = redlockRun(t, masters, "exec", "--permits", "2", "encode", "--", "touch", marker)
	if code != exitNotAcquired || strings.Count(errOut, "\n") != 1 ||
		!strings.HasPrefix(errOut, `redlock: semaphore "encode": none of 2 permits acquired; `) {
		t.Fatalf("both permits held: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran without a permit")
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = redlockRun(t, masters, "exec", "--permits", "2", "encode", "--", "sh", "-c", `echo "permit=$QUORUMLOCK_PERMIT"`)
	if code != exitOK || out != "permit="+string(rune('0'+a.Slot()))+"\n" {
		t.Fatalf("exit %d, output %q, stderr %s", code, out, errOut)
	}
	// The permit was released: status shows one held, by the holder left.
	code, out, _ = redlockRun(t, masters, "status", "--permits", "2", "encode")
	if code != exitOK || !regexp.MustCompile(`semaphore encode: 1 of 2 permits held\n  permit \d: `).MatchString(out) {
		t.Fatalf("status after exec: %s", out)
	}
	if code, _, errOut := redlockRun(t, masters, "exec", "--permits", "0x", "encode", "--", "true"); code != exitUsage {
		t.Fatalf("a bad --permits: exit %d: %s", code, errOut)
	}
}
