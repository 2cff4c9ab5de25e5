package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/clockfault"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// --help, -h and help print the usage on stdout and exit 0, for the tool
// and for each command, without masters.
func TestHelp_onStdoutExitZeroWithoutMasters(t *testing.T) {
	t.Setenv("REDLOCK_MASTERS", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "usage: redlock [--masters"},
		{[]string{"-h"}, "usage: redlock [--masters"},
		{[]string{"help"}, "usage: redlock [--masters"},
		{[]string{"exec", "--help"}, "usage: redlock exec"},
		{[]string{"exec", "-h"}, "usage: redlock exec"},
		{[]string{"help", "exec"}, "usage: redlock exec"},
		{[]string{"doctor", "--help"}, "usage: redlock doctor [--json]"},
		{[]string{"bench", "--help"}, "usage: redlock bench"},
		{[]string{"bench", "-h"}, "usage: redlock bench"},
		{[]string{"status", "--help"}, "usage: redlock status"},
	} {
		var out, errOut syncBuffer
		code := run(context.Background(), tc.args, &out, &errOut)
		if code != exitOK || !strings.HasPrefix(out.String(), tc.want) || errOut.String() != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", tc.args, code, out.String(), errOut.String())
		}
		if strings.Contains(out.String(), "Usage of") {
			t.Errorf("%q prints the flag package's usage: %q", tc.args, out.String())
		}
	}
	var out, errOut syncBuffer
	run(context.Background(), []string{"exec", "--help"}, &out, &errOut)
	for _, want := range []string{"-ttl", "-grace", "-fence", "QUORUMLOCK_KEY", "QUORUMLOCK_FENCE"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("exec --help does not mention %s:\n%s", want, out.String())
		}
	}
}

// A wrong command line says what is wrong, then the usage, on stderr.
func TestUsageErrors_sayWhatIsWrong(t *testing.T) {
	t.Setenv("REDLOCK_MASTERS", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"exec"}, "redlock exec: no KEY and no COMMAND"},
		{[]string{"exec", "foo"}, `redlock exec: no COMMAND after KEY "foo": give KEY -- COMMAND`},
		{[]string{"exec", "foo", "--"}, `redlock exec: no COMMAND after "foo" --`},
		{[]string{"exec", "--grace", "-1s", "foo", "--", "true"}, "redlock exec: --grace must not be negative"},
		{[]string{"exec", "--nope", "foo", "--", "true"}, "redlock exec: flag provided but not defined: -nope"},
		{[]string{"bench", "--clients", "0"}, "redlock bench: --clients must be at least 1"},
		{[]string{"bench", "extra"}, `redlock bench: unexpected argument "extra"`},
		{[]string{"doctor", "extra"}, `redlock doctor: unexpected argument "extra"`},
		{[]string{"--nope"}, "redlock: flag provided but not defined: -nope"},
		{[]string{}, "redlock: no command given"},
		{[]string{"frobnicate"}, `redlock: unknown command "frobnicate"`},
	} {
		var out, errOut syncBuffer
		code := run(context.Background(), tc.args, &out, &errOut)
		if code != exitUsage || !strings.HasPrefix(errOut.String(), tc.want) || !strings.Contains(errOut.String(), "usage: redlock") || out.String() != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want stderr to start with %q", tc.args, code, out.String(), errOut.String(), tc.want)
		}
	}
}

func TestVersion(t *testing.T) {
	var out, errOut syncBuffer
	if code := run(context.Background(), []string{"--version"}, &out, &errOut); code != exitOK ||
		!regexp.MustCompile(`^redlock (v\S+|\(devel\)( [0-9a-f]+(\+modified)?)?|\(unknown: .*\))\n$`).MatchString(out.String()) {
		t.Errorf("--version: exit %d, %q %q", code, out.String(), errOut.String())
	}
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{&debug.BuildInfo{Main: debug.Module{Version: "v0.4.1"}}, "v0.4.1"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "c0f2e3f1"}, {Key: "vcs.modified", Value: "true"}}}, "(devel) c0f2e3f1+modified"},
		{&debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "c0f2e3f1"}}}, "(devel) c0f2e3f1"},
	} {
		if got := versionString(tc.bi, true); got != tc.want {
			t.Errorf("versionString(%+v) = %q, want %q", tc.bi.Main, got, tc.want)
		}
	}
}

// Not on a terminal, bench draws no progress (no \r in a log); on one it
// does. One client is "1 client".
func TestBench_progressOnlyOnATerminal(t *testing.T) {
	masters := addrsOf(redistest.Start(t, 1))
	code, out, errOut := redlockRun(t, masters, "bench", "--duration", "300ms")
	if code != exitOK || strings.Contains(errOut, "\r") || errOut != "" {
		t.Errorf("exit %d; stderr %q", code, errOut)
	}
	if !regexp.MustCompile(`^1 master, 1 client, .*, 0 failures\n$`).MatchString(out) {
		t.Errorf("summary %q", out)
	}
	var o, eo syncBuffer
	e, err := openEnv(masters, 500*time.Millisecond, &o, &eo)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	e.isTerminal = func(w io.Writer) bool { return w == io.Writer(&eo) }
	if code := cmdBench(context.Background(), e, 300*time.Millisecond, 2, "k"); code != exitOK {
		t.Fatalf("exit %d: %s", code, eo.String())
	}
	if !strings.Contains(eo.String(), "\r[###") {
		t.Errorf("no progress bar on a terminal: %q", eo.String())
	}
}

func TestSummarize_arithmeticForEveryN(t *testing.T) {
	for n := 1; n <= 7; n++ {
		q := n/2 + 1
		for healthy := 0; healthy <= n; healthy++ {
			var rs []*report
			for i := 0; i < n; i++ {
				r := &report{Verdict: "OK"}
				if i >= healthy {
					r.Verdict = "FAIL"
				}
				rs = append(rs, r)
			}
			s := summarize(rs)
			if s.Quorum != q || s.Healthy != healthy || s.Tolerates != healthy-q {
				t.Errorf("N=%d healthy=%d: %+v", n, healthy, s)
			}
			var want string
			switch tol := healthy - q; {
			case tol == 1:
				want = "; a quorum of " + itoa(q) + " tolerates 1 more failure"
			case tol >= 0:
				want = "; a quorum of " + itoa(q) + " tolerates " + itoa(tol) + " more failures"
			case tol == -1:
				want = "; a quorum needs " + itoa(q) + ": no lock can be taken until 1 more master is healthy"
			default:
				want = "; a quorum needs " + itoa(q) + ": no lock can be taken until " + itoa(-tol) + " more masters are healthy"
			}
			want = itoa(healthy) + " of " + itoa(n) + " masters healthy" + want
			if s.Text != want {
				t.Errorf("N=%d healthy=%d: %q, want %q", n, healthy, s.Text, want)
			}
		}
	}
}

// Every finding is a line of its own: a FAIL does not carry a WARN's text.
func TestDoctor_eachFindingOnItsOwnLine(t *testing.T) {
	evictingNoAOF := redistest.StartOne(t, redistest.WithConfig("maxmemory-policy", "allkeys-lru"))
	code, out, _ := redlockRun(t, []string{evictingNoAOF.Addr()}, "doctor")
	if code != exitFailure {
		t.Errorf("exit %d", code)
	}
	lines := strings.Split(out, "\n")
	var fails, warns []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "FAIL: ") {
			fails = append(fails, l)
		}
		if strings.HasPrefix(l, "WARN: ") {
			warns = append(warns, l)
		}
	}
	if len(fails) != 1 || !strings.HasPrefix(fails[0], "FAIL: maxmemory-policy allkeys-lru") || strings.Contains(fails[0], "AOF") {
		t.Errorf("FAIL lines %q\n%s", fails, out)
	}
	if len(warns) != 1 || !strings.HasPrefix(warns[0], "WARN: no AOF") {
		t.Errorf("WARN lines %q\n%s", warns, out)
	}
	if !strings.HasSuffix(out, "\n0 of 1 masters healthy; a quorum needs 1: no lock can be taken until 1 more master is healthy\n") {
		t.Errorf("summary:\n%s", out)
	}
}

// A master that accepts connections but never answers (stopped) is called
// hung, not unreachable; the summary counts it out.
func TestDoctor_hungMasterIsNotAnswering(t *testing.T) {
	servers := redistest.Start(t, 3, redistest.WithAOF())
	if err := servers[1].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[1].Resume()
	code, out, errOut := redlockRun(t, addrsOf(servers), "doctor")
	if code != exitFailure {
		t.Errorf("exit %d", code)
	}
	if !regexp.MustCompile(`(?m)^  FAIL: not answering within [0-9.]+m?s \(hung or overloaded\)$`).MatchString(out) ||
		strings.Contains(out, "i/o timeout") || strings.Contains(out, "unreachable") {
		t.Errorf("doctor on a hung master:\n%s%s", out, errOut)
	}
	if !strings.HasSuffix(out, "\n2 of 3 masters healthy; a quorum of 2 tolerates 0 more failures\n") {
		t.Errorf("summary:\n%s", out)
	}
}

// localhost:P and 127.0.0.1:P are one server: both FAIL, by run_id.
func TestDoctor_sameServerTwiceFails(t *testing.T) {
	s := redistest.StartOne(t, redistest.WithAOF())
	other := redistest.StartOne(t, redistest.WithAOF())
	port := strings.TrimPrefix(s.Addr(), "127.0.0.1:")
	code, out, errOut := redlockRun(t, []string{s.Addr(), "localhost:" + port, other.Addr()}, "doctor")
	if code != exitFailure {
		t.Errorf("exit %d:\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"  FAIL: the same server as localhost:" + port + " (run_id ",
		"  FAIL: the same server as " + s.Addr() + " (run_id ",
		"1 of 3 masters healthy; a quorum needs 2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor lacks %q:\n%s", want, out)
		}
	}
}

// doctor --json: one object, the schema of docs/operations.md.
func TestDoctor_json(t *testing.T) {
	good := redistest.StartOne(t, redistest.WithAOF())
	plain := redistest.StartOne(t)
	code, out, errOut := redlockRun(t, []string{good.Addr(), plain.Addr(), "127.0.0.1:1"}, "doctor", "--json")
	if code != exitFailure {
		t.Errorf("exit %d: %s", code, errOut)
	}
	var doc struct {
		Masters []map[string]any `json:"masters"`
		Summary map[string]any   `json:"summary"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(doc.Masters) != 3 {
		t.Fatalf("%d masters:\n%s", len(doc.Masters), out)
	}
	g, p, down := doc.Masters[0], doc.Masters[1], doc.Masters[2]
	for _, k := range []string{"address", "reachable", "version", "role", "run_id", "round_trip_us", "clock_offset_ms",
		"appendonly", "appendfsync", "maxmemory_policy", "verdict", "problems", "warnings"} {
		if _, ok := g[k]; !ok {
			t.Errorf("no %q in %v", k, g)
		}
	}
	if g["address"] != good.Addr() || g["reachable"] != true || g["verdict"] != "OK" || g["appendonly"] != "yes" || g["role"] != "master" {
		t.Errorf("good master: %v", g)
	}
	if p["verdict"] != "WARN" || len(p["warnings"].([]any)) != 1 || len(p["problems"].([]any)) != 0 {
		t.Errorf("plain master: %v", p)
	}
	if down["verdict"] != "FAIL" || down["reachable"] != false || down["error"] == nil ||
		!strings.HasPrefix(down["problems"].([]any)[0].(string), "unreachable: ") {
		t.Errorf("down master: %v", down)
	}
	want := map[string]string{"masters": "3", "healthy": "2", "quorum": "2", "tolerates": "0",
		"text": "2 of 3 masters healthy; a quorum of 2 tolerates 0 more failures"}
	for k, v := range want {
		if got := fmt.Sprint(doc.Summary[k]); got != v {
			t.Errorf("summary %s = %v, want %s", k, got, v)
		}
	}
}

// doctor measures each master's clock rate against the local monotonic
// clock: a master whose clock runs 50 % fast FAILs, one 0.5 % fast is
// within the default drift factor (1 %) but not within 0.2 %.
func TestDoctor_measuresClockRate(t *testing.T) {
	redistest.SkipShort(t)
	skewed := func(rate float64) *redistest.Server {
		clk, err := clockfault.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { clk.Close() })
		env, err := clk.Env()
		if err != nil {
			t.Fatal(err)
		}
		s := redistest.StartOne(t, redistest.WithAOF(), redistest.WithEnv(env...))
		if err := clk.SetRate(rate); err != nil {
			t.Fatal(err)
		}
		return s
	}
	real, fast, slightly := redistest.StartOne(t, redistest.WithAOF()), skewed(1.5), skewed(1.005)
	addrs := []string{real.Addr(), fast.Addr(), slightly.Addr()}

	code, out, errOut := redlockRun(t, addrs, "doctor", "--rate-sample", "2s")
	if code != exitFailure {
		t.Errorf("exit %d:\n%s%s", code, out, errOut)
	}
	blocks := strings.Split(out, "\n127.0.0.1:")
	if len(blocks) != 3 {
		t.Fatalf("doctor:\n%s", out)
	}
	rate := regexp.MustCompile(`clock rate ([0-9.]+)% (fast|slow) against the local monotonic clock \(±([0-9.]+)%, sampled over 2s\)`)
	// measured returns the rate difference in % and its error bound, which
	// a loaded machine widens (slow round trips).
	measured := func(block string) (float64, float64) {
		t.Helper()
		m := rate.FindStringSubmatch(block)
		if m == nil {
			t.Fatalf("no clock rate in:\n%s", block)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		if m[2] == "slow" {
			v = -v
		}
		bound, _ := strconv.ParseFloat(m[3], 64)
		return v, bound + 0.001
	}
	if v, bound := measured(blocks[0]); math.Abs(v) > bound {
		t.Errorf("the real clock measured %.3f%% ± %.3f%% off", v, bound)
	}
	if !strings.Contains(blocks[0], "  OK") && !strings.Contains(blocks[0], "WARN: clock rate measured only to") {
		t.Errorf("the real clock's master:\n%s", blocks[0])
	}
	if v, bound := measured(blocks[1]); math.Abs(v-50) > bound {
		t.Errorf("the 50%% fast clock measured %.3f%% ± %.3f%%", v, bound)
	}
	if !strings.Contains(blocks[1], "% fast against the local monotonic clock: more than the drift factor 1% allows") {
		t.Errorf("the 50%% fast master does not FAIL for its clock:\n%s", blocks[1])
	}
	if v, bound := measured(blocks[2]); math.Abs(v-0.5) > bound {
		t.Errorf("the 0.5%% fast clock measured %.3f%% ± %.3f%%", v, bound)
	}
	if strings.Contains(blocks[2], "FAIL") {
		t.Errorf("the 0.5%% fast master is not within the drift factor:\n%s", blocks[2])
	}
	if !strings.HasSuffix(out, "\n2 of 3 masters healthy; a quorum of 2 tolerates 0 more failures\n") {
		t.Errorf("summary:\n%s", out)
	}

	// A tighter drift factor fails the slightly fast master too; --json
	// carries the rate.
	code, out, errOut = redlockRun(t, []string{slightly.Addr()}, "doctor", "--json", "--rate-sample", "2s", "--drift-factor", "0.002")
	if code != exitFailure || !strings.Contains(out, `"clock_rate": 1.00`) || !strings.Contains(out, `"clock_rate_error": `) ||
		!strings.Contains(out, "more than the drift factor 0.2% allows") {
		t.Errorf("exit %d with --drift-factor 0.002:\n%s%s", code, out, errOut)
	}
	// --rate-sample 0 skips the check.
	code, out, _ = redlockRun(t, []string{fast.Addr()}, "doctor", "--rate-sample", "0")
	if code != exitOK || strings.Contains(out, "clock rate") {
		t.Errorf("exit %d with --rate-sample 0:\n%s", code, out)
	}
}
