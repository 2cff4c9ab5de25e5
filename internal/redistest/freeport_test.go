package redistest

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// A port FreePort reserved is outside the kernel's ephemeral range (where
// outgoing connections would take it while its server is down), and its
// lock file is held, so another test process does not draw it, until the
// test that reserved it ends.
func TestFreePort_reservedAgainstOtherProcessesUntilTheTestEnds(t *testing.T) {
	var port int
	t.Run("reserve", func(t *testing.T) {
		var err error
		if port, err = FreePort(t); err != nil {
			t.Fatal(err)
		}
		if first, last := reservedSpan(); first > 0 && (port < first || port > last) {
			t.Errorf("port %d outside %d-%d", port, first, last)
		}
		if lo, hi, ok := ephemeralRange(); ok && port >= lo && port <= hi {
			t.Errorf("port %d in the ephemeral range %d-%d", port, lo, hi)
		}
		if !lockedElsewhere(t, port) {
			t.Errorf("port %d: its lock file is free while it is reserved", port)
		}
	})
	if lockedElsewhere(t, port) {
		t.Errorf("port %d: its lock file is still held after the test that reserved it", port)
	}
}

// lockedElsewhere reports whether the port's lock file is held (by another
// open file, as another process would find it).
func lockedElsewhere(t *testing.T, port int) bool {
	t.Helper()
	given.Lock()
	dir, err := portsDir()
	given.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// The ports' lock directory is open to every user of the machine, as the
// temporary directory is: anyone may add a lock file, none may remove
// another's.
func TestFreePort_lockDirectorySharedByEveryUser(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	if _, err := FreePort(t); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(os.TempDir(), "quorumlock-ports"))
	if err != nil {
		t.Fatal(err)
	}
	if want := os.ModeDir | os.ModeSticky | 0o777; fi.Mode() != want {
		t.Errorf("mode %v, want %v", fi.Mode(), want)
	}
}
