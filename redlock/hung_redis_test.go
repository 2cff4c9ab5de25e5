package redlock_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// A master that stops reading (frozen, as SIGSTOP leaves it) for less
// than the stall bound. Once its oldest command has gone unanswered for
// longer than the per-master timeout, the pipelined connection to it is
// down: acquisitions fail at once, without being written, while releases
// are still queued (the master runs them when it answers). Before, every
// acquisition was written to the frozen master's socket too and piled up
// there until the stall bound, its caller long gone. When the master
// answers again, the same connection carries acquisitions again.
func TestMux_frozenMasterGetsNoAcquisitionsOnceDown(t *testing.T) {
	reals := redistest.Start(t, 3)
	thaw := make(chan struct{})
	fm := hostile.NewProxy(t, reals[2].Addr(), func(fc *hostile.Conn, cmd []string) hostile.Verdict {
		if fc.LockIndex == 0 && !strings.EqualFold(cmd[0], "SCRIPT") && !strings.EqualFold(cmd[0], "INFO") {
			// (The first contact's INFO probe passes: the SET is what freezes.)
			sleepOr(time.Hour, thaw) // reads nothing more until thawed
		}
		return hostile.Forward
	})
	defer func() {
		select {
		case <-thaw:
		default:
			close(thaw)
		}
	}()
	// Stall bound: 10 × 150 ms = 1.5 s, well beyond this test's freeze.
	c := addrClient(t, pipelinedPath, []string{reals[0].Addr(), reals[1].Addr(), fm.Addr()}, redlock.WithTimeout(150*time.Millisecond))
	ctx := ctxT(t)
	cycle := func(key string) {
		t.Helper()
		l, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatalf("Acquire %s: %v", key, err)
		}
		l.Release(ctx)
	}
	cycle("k0") // its SET freezes the master; its release waits behind it
	// the subject: the frozen master's silence passes the per-master timeout
	time.Sleep(300 * time.Millisecond)
	for i := 1; i <= 20; i++ {
		cycle(fmt.Sprintf("k%d", i))
	}
	close(thaw)
	// The master answers what it had; the connection carries commands again.
	probes := 0
	if !redistest.Within(10*time.Second, func() bool {
		cycle(fmt.Sprintf("probe%d", probes))
		probes++
		return strings.Contains(strings.Join(fm.LockConn(0).Commands(), ","), "probe")
	}) {
		t.Fatalf("the thawed master never got a command again; it saw %v", fm.Seen())
	}
	var sets, releases []string
	for _, s := range fm.LockConn(0).Commands() {
		switch {
		case strings.Contains(s, "probe"):
		case strings.HasPrefix(s, "SET "):
			sets = append(sets, s)
		case strings.HasPrefix(s, "EVALSHA "):
			releases = append(releases, s)
		}
	}
	if len(sets) != 1 {
		t.Errorf("the frozen master got %d acquisitions, want k0's alone (the connection was down for the others): %v", len(sets), sets)
	}
	if len(releases) != 21 {
		t.Errorf("the frozen master got %d releases, want all 21: %v", len(releases), releases)
	}
	if fm.LockConn(1) != nil {
		t.Errorf("a second connection carried lock commands: the pipelined one was broken")
	}
}
