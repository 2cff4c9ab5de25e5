package main

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseBenchCSV(t *testing.T) {
	out := "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n" +
		"\"SET bk:__rand_int__ tok NX PX 10000\",\"84530.86\",\"8.645\",\"0.560\",\"7.127\",\"21.071\",\"27.807\",\"64.991\"\n"
	got, err := parseBenchCSV([]byte(out))
	if err != nil || got != 84530.86 {
		t.Fatalf("parseBenchCSV = %v, %v; want 84530.86", got, err)
	}
	for _, bad := range []string{"", "\"test\",\"rps\"\n", "garbage\n1,2\n", "\"test\",\"rps\"\n\"SET\",\"x\"\n"} {
		if _, err := parseBenchCSV([]byte(bad)); err == nil {
			t.Errorf("parseBenchCSV(%q) did not fail", bad)
		}
	}
}

// TestCeiling runs redis-benchmark against real masters and checks that
// the ceiling is measured and combined as 1 / (1/SET + 1/EVAL).
func TestCeiling(t *testing.T) {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		t.Skip("redis-benchmark is not installed (make bench-deps)")
	}
	servers := redistest.Start(t, 5)
	e := &env{duration: 100 * time.Millisecond, metrics: map[string]float64{}}
	for _, s := range servers {
		e.addrs = append(e.addrs, s.Addr())
	}
	section := ceiling(context.Background(), e)
	set, eval, cycles := e.metrics["ceiling set"], e.metrics["ceiling eval"], e.metrics["ceiling cycles"]
	if set <= 0 || eval <= 0 {
		t.Fatalf("ceiling not measured: %v\n%s", e.metrics, section)
	}
	if want := 1 / (1/set + 1/eval); cycles < want*0.999 || cycles > want*1.001 {
		t.Errorf("ceiling cycles %v, want %v", cycles, want)
	}
	if !strings.Contains(section, "lock+unlock cycles/s") {
		t.Errorf("the section does not print the ceiling:\n%s", section)
	}
}

// memLocker is an in-memory lock shared by the clients of a test of run's
// accounting (pure bookkeeping, no Redis involved).
type memLocker struct {
	mu *sync.Mutex
}

func (m memLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m.mu.Lock()
	return func(context.Context) error { m.mu.Unlock(); return nil }, nil
}

func (m memLocker) close() {}

// TestRunHandoffs checks that run counts a lock taken again by the client
// that released it as "self", and times only the handoffs to another.
func TestRunHandoffs(t *testing.T) {
	var mu sync.Mutex
	e := &env{duration: 50 * time.Millisecond}
	r := run(context.Background(), e, []locker{memLocker{&mu}, memLocker{&mu}}, "k", 0, 0, true)
	if r.cycles == 0 || r.acqFailures != 0 || r.relFailures != 0 {
		t.Fatalf("cycles %d, failures %d/%d", r.cycles, r.acqFailures, r.relFailures)
	}
	if got := len(r.handoffs) + r.self; got != r.cycles-1 {
		t.Errorf("handoffs %d + self %d = %d, want every cycle but the first (%d)", len(r.handoffs), r.self, got, r.cycles-1)
	}
	for _, h := range r.handoffs {
		if h <= 0 {
			t.Fatalf("handoff %v", h)
		}
	}
	one := run(context.Background(), e, []locker{memLocker{&mu}}, "k", 0, 0, true)
	if len(one.handoffs) != 0 || one.self != one.cycles-1 {
		t.Errorf("one client: handoffs %d, self %d of %d cycles; want 0 and all but the first", len(one.handoffs), one.self, one.cycles)
	}
}

// TestTargets checks the verdicts: met, not met, not measured, and counts.
func TestTargets(t *testing.T) {
	m := map[string]float64{
		"par5 quorumlock rate": 9000, "par5 go-redsync rate": 1500, // 6× ≥ 3: met
		"seq1 quorumlock p50": 150, "seq1 bsm/redislock p50": 100, // 1.5 > 1.1: not met
		"busy quorumlock failed": 0, "busy quorumlock unconfirmed": 0,
		"busy quorumlock (pooled) failed": 3, "busy quorumlock (pooled) unconfirmed": 4,
		"busy quorumlock (own *redis.Pool) failed": 9, "busy quorumlock (own *redis.Pool) unconfirmed": 1,
		"busy quorumlock (own *redis.Pool) probe p99": float64(80 * time.Millisecond),
		"expiry5 quorumlock p50":                      float64(12 * time.Millisecond),
	}
	wantLines(t, targetsSection(m),
		"| 64 clients, N=5, cycles/s: quorumlock ÷ go-redsync ≥ 3 | 6.00 | met |",
		"| one client, N=1, p50: quorumlock ÷ bsm/redislock ≤ 1.1 | 1.50 | not met |",
		"| 64 clients, N=5, busy loop per core, quorumlock: failed acquisitions + unconfirmed releases = 0 | 0 | met |",
		"| 64 clients, N=5, busy loop per core, quorumlock (pooled): failed acquisitions + unconfirmed releases = 0 | 7 | not met |",
		"| 64 clients, N=5, busy loop per core, quorumlock (own *redis.Pool): failed acquisitions + unconfirmed releases = 0 | 10 | inconclusive: the probe's PING p99 was 80.000 ms (> 25ms), the machine is overloaded |",
		"| go-redis adapter: 64 clients, N=5, cycles/s ÷ go-redsync on go-redis ≥ 2 | not measured | – |",
		"| a lock left to expire, N=5: the waiter holds it, p50 ms after it expired on a quorum ≤ 50 | 12.00 | met |",
	)
}

// TestCellVerdict checks a cell's verdict on all its targets: met when
// every figure is, not met naming the figures that are not (an error in
// any row among them), not measured when a figure is missing.
func TestCellVerdict(t *testing.T) {
	milli := float64(time.Millisecond)
	m := map[string]float64{
		"turns quorumlock attempts": 1.2, "turns quorumlock p99": 130 * milli, "turns quorumlock fifo": 104 * milli, "turns errors": 0,
	}
	if v, figures := cellVerdict(turnsCellName, m); v != "met" ||
		figures != "attempts per lock ≤ 1.5: 1.20; p99 wait ÷ the FIFO bound ≤ 1.5: 1.25; failed locks + unlocks, every library = 0: 0" {
		t.Errorf("turns: %q, %q", v, figures)
	}
	m["turns errors"] = 2
	m["turns quorumlock p99"] = 200 * milli
	if v, _ := cellVerdict(turnsCellName, m); v != "not met (p99 wait ÷ the FIFO bound ≤ 1.5; failed locks + unlocks, every library = 0)" {
		t.Errorf("turns with errors and a slow p99: %q", v)
	}

	cell, p := contentionCellName(3, time.Millisecond), contentionPrefix(3, time.Millisecond)
	if cell != "8 clients, one key, N=3, 1 ms hold" {
		t.Fatalf("cell name %q", cell)
	}
	m[p+"quorumlock rate"], m[p+"go-redsync rate"] = 900, 600
	m[p+"quorumlock p99 cycle"], m[p+"go-redsync p99 cycle"] = 10*milli, 100*milli
	if v, _ := cellVerdict(cell, m); v != "not measured" {
		t.Errorf("N=3 without its errors figure: %q", v)
	}
	m[p+"errors"] = 0
	if v, _ := cellVerdict(cell, m); v != "met" {
		t.Errorf("N=3: %q", v)
	}
	m[p+"errors"] = 1
	if v, _ := cellVerdict(cell, m); v != "not met (failed locks + unlocks, every library = 0)" {
		t.Errorf("N=3 with an error: %q", v)
	}
	if strings.Contains(targetsSection(m), "N=3, 1 ms hold: cycles/s") {
		t.Error("N=3 judged on cycles/s: only N=5 has that goal")
	}
	// The N=5 targets keep their names.
	wantLines(t, targetsSection(m),
		"| 8 clients, one key, N=5, no hold: cycles/s ÷ go-redsync's ≥ 1.0 | not measured | – |",
		"| 8 clients, one key, N=5, 1 ms hold: attempts per lock ≤ 1.5 | not measured | – |",
		"| 8 clients, one key, N=3, 1 ms hold: failed locks + unlocks, every library = 0 | 1 | not met |",
		"| 6 workers, one key, N=5, 20 ms holds: p99 wait ÷ the FIFO bound ≤ 1.5 | 1.92 | not met |",
	)
}

// wantLines fails t for each of want that s does not contain.
func wantLines(t *testing.T, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("missing %q in\n%s", w, s)
		}
	}
}
