package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// A job that ends before --min-hold leaves the key held: a replica whose
// schedule fires late does not run the same slot again, and once the
// minimum has passed the next slot runs.
func TestExec_minHoldKeepsTheSlotFromRunningTwice(t *testing.T) {
	masters := addrsOf(redistest.Start(t, 3))
	dir := t.TempDir()
	first, late := filepath.Join(dir, "first"), filepath.Join(dir, "late")
	if code, _, errOut := redlockRun(t, masters, "exec", "--min-hold", "2s", "slot", "--", "touch", first); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if code, _, errOut := redlockRun(t, masters, "exec", "--wait", "0", "slot", "--", "touch", late); code != exitNotAcquired {
		t.Fatalf("a late replica within the minimum: exit %d, want %d; stderr: %s", code, exitNotAcquired, errOut)
	}
	if _, err := os.Stat(late); err == nil {
		t.Fatal("the late replica ran the slot again")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ran := redistest.WaitFor(ctx, func() bool {
		code, _, _ := redlockRun(t, masters, "exec", "--wait", "0", "slot", "--", "touch", late)
		return code == 0
	})
	if !ran {
		t.Fatal("the key was still held long after the minimum")
	}
	if code, _, errOut := redlockRun(t, masters, "exec", "--min-hold", "-1s", "slot", "--", "true"); code != exitUsage {
		t.Errorf("negative --min-hold: exit %d: %s", code, errOut)
	}
}
