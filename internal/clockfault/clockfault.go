// Package clockfault makes one process's wall clock run fast or slow, or
// jump, without touching the machine's clock: the tests' way to give a
// redis-server master a misbehaving clock.
//
// Redis 7.0 expires keys by its wall clock (gettimeofday; docs/testing.md,
// "Clock faults"), so a master whose wall clock runs 1.5 times as fast lets
// a key go after two thirds of its TTL, and one whose wall clock jumps
// forward by more than a key's TTL lets it go at once.
//
// The mechanism is a small preload library (shim/clockshim.c, embedded), built
// with the machine's C compiler on first use and loaded into the process
// with LD_PRELOAD. It replaces clock_gettime, gettimeofday and time; it
// changes only the wall clocks (CLOCK_REALTIME and its coarse variant) and
// passes the monotonic clocks through. A Clock steers it through a 64-byte
// control file that both sides map shared, so a rate change or a jump is
// seen by the process's very next clock reading, and it survives a restart
// of the process (like the clock of a real machine).
//
// Why not Debian's libfaketime: preloaded into Debian's redis-server, it
// deadlocks at start-up. redis-server is linked with jemalloc, whose
// initialisation reads clock_gettime; libfaketime's clock_gettime
// initialises itself with dlsym, which allocates, which re-enters jemalloc's
// unfinished initialisation (libfaketime issue #130, open since 0.9.7; seen
// here with 0.9.10, with and without FAKETIME_DONT_FAKE_MONOTONIC). The shim
// never allocates or calls dlsym: it reads the real clocks with the raw
// clock_gettime system call.
package clockfault

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

//go:embed shim/clockshim.c
var source []byte

// FileEnv names the environment variable through which the shim finds its
// control file.
const FileEnv = "QUORUMLOCK_CLOCK_FILE"

// CompilerEnv names the environment variable that chooses the C compiler
// that builds the shim; by default "cc".
const CompilerEnv = "CC"

var build struct {
	once sync.Once
	path string
	err  error
}

// Library returns the path of the preload library, building it on the
// first call of the process into the system's temporary directory (one
// file per version of the source, shared by test binaries). It needs a C
// compiler; without one the error says what to install.
func Library() (string, error) {
	build.once.Do(func() { build.path, build.err = buildLibrary() })
	return build.path, build.err
}

func buildLibrary() (string, error) {
	sum := sha256.Sum256(source)
	dir := filepath.Join(os.TempDir(), "quorumlock-clockshim")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("clockfault: %w", err)
	}
	lib := filepath.Join(dir, "clockshim-"+hex.EncodeToString(sum[:8])+".so")
	if _, err := os.Stat(lib); err == nil {
		return lib, nil
	}
	cc := os.Getenv(CompilerEnv)
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", fmt.Errorf("clockfault: no C compiler (%s) to build the clock shim: install gcc (`make deps` does): %w", cc, err)
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("clockfault: %w", err)
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "clockshim.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return "", fmt.Errorf("clockfault: %w", err)
	}
	out := filepath.Join(tmp, "clockshim.so")
	cmd := exec.Command(cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", out, src)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("clockfault: building the clock shim with %s: %w: %s", cc, err, msg)
	}
	// Rename is atomic: a concurrent builder's file is replaced by an
	// identical one.
	if err := os.Rename(out, lib); err != nil {
		return "", fmt.Errorf("clockfault: %w", err)
	}
	return lib, nil
}

// The control file's layout (shim/clockshim.c): four 64-bit fields.
const (
	offSeq      = 0
	offBaseReal = 8
	offBaseFake = 16
	offRate     = 24
	fileSize    = 64
)

// Clock steers the wall clock of the processes started with its Env. Its
// methods are safe for concurrent use. The zero value is not usable: call
// New.
type Clock struct {
	path string

	mu  sync.Mutex
	mem []byte // the control file, mapped shared; nil once closed
}

// New creates a control file in dir and returns its Clock, which starts
// real (rate 1, no offset). Close unmaps it; the file stays for the
// process to read until dir is removed.
func New(dir string) (*Clock, error) {
	path := filepath.Join(dir, "clock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("clockfault: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(fileSize); err != nil {
		return nil, fmt.Errorf("clockfault: %w", err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, fileSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("clockfault: mapping %s: %w", path, err)
	}
	return &Clock{path: path, mem: mem}, nil
}

// Env returns the environment variables that put a process started with
// them under this clock: LD_PRELOAD with the shim (built on first use) and
// FileEnv.
func (c *Clock) Env() ([]string, error) {
	lib, err := Library()
	if err != nil {
		return nil, err
	}
	return []string{"LD_PRELOAD=" + lib, FileEnv + "=" + c.path}, nil
}

// Path returns the control file's path.
func (c *Clock) Path() string { return c.path }

var errClosed = errors.New("clockfault: clock closed")

func (c *Clock) word(off int) *uint64 { return (*uint64)(unsafe.Pointer(&c.mem[off])) }

// state reads the fields; the caller holds mu (the only writer).
func (c *Clock) state() (set bool, baseReal, baseFake int64, rate float64) {
	if atomic.LoadUint64(c.word(offSeq)) == 0 {
		return false, 0, 0, 1
	}
	return true, int64(atomic.LoadUint64(c.word(offBaseReal))),
		int64(atomic.LoadUint64(c.word(offBaseFake))),
		math.Float64frombits(atomic.LoadUint64(c.word(offRate)))
}

func fake(now int64, set bool, baseReal, baseFake int64, rate float64) int64 {
	if !set || rate <= 0 {
		return now
	}
	return baseFake + int64(float64(now-baseReal)*rate)
}

// update re-bases the clock at the present moment, so its reading stays
// continuous, then applies a jump and a new rate.
func (c *Clock) update(jump time.Duration, rate float64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil {
		return errClosed
	}
	set, br, bf, old := c.state()
	if rate == 0 {
		rate = old
	}
	now := time.Now().UnixNano()
	seq := atomic.LoadUint64(c.word(offSeq))
	atomic.StoreUint64(c.word(offSeq), seq+1) // odd: readers wait
	atomic.StoreUint64(c.word(offBaseReal), uint64(now))
	atomic.StoreUint64(c.word(offBaseFake), uint64(fake(now, set, br, bf, old)+int64(jump)))
	atomic.StoreUint64(c.word(offRate), math.Float64bits(rate))
	atomic.StoreUint64(c.word(offSeq), seq+2) // even, and never 0 again
	return nil
}

// SetRate makes the clock run at rate times real speed from now on (1.005
// is 0.5 % fast, 0.5 half speed), continuing from its present reading.
func (c *Clock) SetRate(rate float64) error {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return fmt.Errorf("clockfault: rate %v: want a finite rate > 0", rate)
	}
	return c.update(0, rate)
}

// Jump moves the clock by d at once (forward for d > 0), keeping its rate.
func (c *Clock) Jump(d time.Duration) error { return c.update(d, 0) }

// Reset makes the clock real again: rate 1, no offset.
func (c *Clock) Reset() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil {
		return errClosed
	}
	seq := atomic.LoadUint64(c.word(offSeq))
	if seq == 0 {
		return nil
	}
	now := time.Now().UnixNano()
	atomic.StoreUint64(c.word(offSeq), seq+1)
	atomic.StoreUint64(c.word(offBaseReal), uint64(now))
	atomic.StoreUint64(c.word(offBaseFake), uint64(now))
	atomic.StoreUint64(c.word(offRate), math.Float64bits(1))
	atomic.StoreUint64(c.word(offSeq), seq+2)
	return nil
}

// Rate returns the clock's present rate (1 when never set).
func (c *Clock) Rate() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil {
		return 1
	}
	_, _, _, rate := c.state()
	return rate
}

// Offset returns how far the clock is ahead of the real wall clock now
// (negative when behind).
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil {
		return 0
	}
	now := time.Now().UnixNano()
	set, br, bf, rate := c.state()
	return time.Duration(fake(now, set, br, bf, rate) - now)
}

// Close unmaps the control file. A process still running keeps the clock
// it had.
func (c *Clock) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mem == nil {
		return nil
	}
	err := syscall.Munmap(c.mem)
	c.mem = nil
	return err
}
