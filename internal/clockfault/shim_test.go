package clockfault_test

import (
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/clockfault"
)

// probeSource reads every clock the shim replaces, each through libc (the
// shim) and through the raw system call (the kernel), and prints the
// differences in ms: realtime, monotonic, gettimeofday, and time() in s.
const probeSource = `#define _GNU_SOURCE
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
static long long ns(struct timespec t) { return t.tv_sec * 1000000000LL + t.tv_nsec; }
int main(void) {
	struct timespec r, kr, m, km;
	struct timeval tv;
	clock_gettime(CLOCK_REALTIME, &r);
	syscall(SYS_clock_gettime, CLOCK_REALTIME, &kr);
	clock_gettime(CLOCK_MONOTONIC, &m);
	syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &km);
	gettimeofday(&tv, 0);
	time_t s = time(0);
	printf("%lld %lld %lld %lld\n", (ns(r) - ns(kr)) / 1000000, (ns(m) - ns(km)) / 1000000,
		((long long)tv.tv_sec * 1000000 + tv.tv_usec) / 1000 - ns(kr) / 1000000, (long long)s - kr.tv_sec);
	return 0;
}
`

// probe builds the probe program once per test.
func probe(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds C programs")
	}
	if _, err := clockfault.Library(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "probe.c"), filepath.Join(dir, "probe")
	if err := os.WriteFile(src, []byte(probeSource), 0o644); err != nil {
		t.Fatal(err)
	}
	cc := os.Getenv(clockfault.CompilerEnv)
	if cc == "" {
		cc = "cc"
	}
	if out, err := exec.Command(cc, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v: %s", err, out)
	}
	return bin
}

// isReal reports whether the probe's differences are those of a real clock:
// none beyond what a busy machine puts between two readings (and a second
// boundary between them, for time()).
func isReal(d [4]int64) bool {
	for i, v := range d {
		if tol := map[bool]int64{true: 1, false: 50}[i == 3]; v < -tol || v > tol {
			return false
		}
	}
	return true
}

// runProbe runs the probe under the shim with the control file path and
// returns its four differences (ms, ms, ms, s).
func runProbe(t *testing.T, bin, control string) [4]int64 {
	t.Helper()
	lib, err := clockfault.Library()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, clockfault.FileEnv+"="+control)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the probe under the shim with control file %s: %v: %s", control, err, out)
	}
	var d [4]int64
	f := strings.Fields(string(out))
	if len(f) != 4 {
		t.Fatalf("probe printed %q", out)
	}
	for i := range d {
		if d[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			t.Fatalf("probe printed %q", out)
		}
	}
	return d
}

// The shim moves the wall clocks (clock_gettime REALTIME, gettimeofday,
// time) and never the monotonic clock.
func TestShim_movesWallClocksOnly(t *testing.T) {
	bin := probe(t)
	c, err := clockfault.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d := runProbe(t, bin, c.Path()); !isReal(d) {
		t.Fatalf("an untouched clock: differences %v, want none", d)
	}
	if err := c.Jump(-time.Hour); err != nil {
		t.Fatal(err)
	}
	d := runProbe(t, bin, c.Path())
	near := func(got, want, tol int64) bool { return got >= want-tol && got <= want+tol }
	if !near(d[0], -3600000, 50) || !near(d[2], -3600000, 50) || !near(d[3], -3600, 1) {
		t.Errorf("after a jump back of 1h: realtime %d ms, gettimeofday %d ms, time %d s; want -1h each", d[0], d[2], d[3])
	}
	if !near(d[1], 0, 50) {
		t.Errorf("after a jump back of 1h the monotonic clock moved by %d ms, want 0", d[1])
	}
}

// A control file the shim cannot trust (empty, or a rate no clock can run
// at) leaves the clock real, as a missing one does, rather than crash the
// process or give it a clock centuries off.
func TestShim_badControlFileLeavesClockReal(t *testing.T) {
	bin := probe(t)
	dir := t.TempDir()
	file := func(name string, seq uint64, baseReal, baseFake int64, rate float64, size int) string {
		b := make([]byte, 64)
		binary.LittleEndian.PutUint64(b[0:], seq)
		binary.LittleEndian.PutUint64(b[8:], uint64(baseReal))
		binary.LittleEndian.PutUint64(b[16:], uint64(baseFake))
		binary.LittleEndian.PutUint64(b[24:], math.Float64bits(rate))
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b[:size], 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := time.Now().UnixNano()
	for _, tc := range []struct {
		name string
		path string
	}{
		{"empty", file("empty", 0, 0, 0, 0, 0)},
		{"short", file("short", 2, now, now+int64(time.Hour), 1, 20)},
		{"NaN rate", file("nan", 2, now, now, math.NaN(), 64)},
		{"infinite rate", file("inf", 2, now, now, math.Inf(1), 64)},
		{"huge rate", file("huge", 2, 0, 0, 1e300, 64)},
		{"base at the edge of time", file("edge", 2, now, math.MaxInt64, 1, 64)},
		{"base before all time", file("before", 2, math.MinInt64, 0, 1, 64)},
		{"missing", filepath.Join(dir, "missing")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := runProbe(t, bin, tc.path); !isReal(d) {
				t.Fatalf("differences %v, want none (a real clock)", d)
			}
		})
	}
}
