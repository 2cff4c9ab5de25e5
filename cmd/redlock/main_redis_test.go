package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// redlockRun runs the command with args on masters and returns its exit
// code, stdout and stderr.
func redlockRun(t *testing.T, masters []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The command's output is copied by exec's goroutines while redlock
	// writes too: the buffers must be safe for that.
	var out, errOut syncBuffer
	all := append([]string{"--masters", strings.Join(masters, ","), "--timeout", "500ms"}, args...)
	code := run(ctx, all, &out, &errOut)
	return code, out.String(), errOut.String()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func addrsOf(servers []*redistest.Server) []string {
	var a []string
	for _, s := range servers {
		a = append(a, s.Addr())
	}
	return a
}

func TestExec_passesTheCommandsExitCodeAndFence(t *testing.T) {
	for _, n := range []int{1, 3} {
		masters := addrsOf(redistest.Start(t, n))
		code, out, errOut := redlockRun(t, masters, "exec", "--fence", "job", "--", "sh", "-c", `echo "key=$QUORUMLOCK_KEY fence=$QUORUMLOCK_FENCE"; exit 3`)
		if code != 3 {
			t.Fatalf("N=%d: exit %d, want the command's 3; stderr: %s", n, code, errOut)
		}
		if !regexp.MustCompile(`^key=job fence=[1-9][0-9]*\n$`).MatchString(out) {
			t.Fatalf("N=%d: output %q", n, out)
		}
		// The lock was released: a second run gets it at once.
		if code, _, errOut := redlockRun(t, masters, "exec", "job", "--", "true"); code != 0 {
			t.Fatalf("N=%d: second run exit %d: %s", n, code, errOut)
		}
		// A command killed by a signal: 128 + the signal.
		if code, _, _ := redlockRun(t, masters, "exec", "job", "--", "sh", "-c", "kill -9 $$"); code != 128+9 {
			t.Fatalf("N=%d: exit %d, want 137", n, code)
		}
	}
}

func TestExec_notAcquiredDoesNotRunTheCommand(t *testing.T) {
	servers := redistest.Start(t, 3)
	masters := addrsOf(servers)
	holder, err := redigo.NewFromAddrs(masters)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	l, err := holder.Acquire(context.Background(), "job", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	marker := filepath.Join(t.TempDir(), "ran")
	code, _, errOut := redlockRun(t, masters, "exec", "--wait", "0", "job", "--", "touch", marker)
	if code != exitNotAcquired {
		t.Fatalf("exit %d, want %d; stderr: %s", code, exitNotAcquired, errOut)
	}
	if !strings.HasPrefix(errOut, `redlock: lock "job" not acquired: 0 of 3 masters agreed, 2 needed; held by another token on master `) ||
		strings.Count(errOut, "redlock:") != 1 || strings.Count(errOut, `"job"`) != 1 || strings.Count(errOut, "\n") != 1 {
		t.Errorf("stderr does not say why once, on one line: %s", errOut)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran without the lock")
	}
	// With a wait, it runs once the holder is gone.
	go func() {
		time.Sleep(300 * time.Millisecond) // the subject: the holder goes only after exec began waiting
		_ = l.Release(context.Background())
	}()
	if code, _, errOut := redlockRun(t, masters, "exec", "--wait", "10s", "job", "--", "touch", marker); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the command did not run")
	}
}

func TestExec_lostLockStopsTheCommand(t *testing.T) {
	servers := redistest.Start(t, 3)
	masters := addrsOf(servers)
	for _, ignoreTerm := range []bool{false, true} {
		script := "sleep 30"
		if ignoreTerm {
			script = `trap "" TERM; sleep 30` // only SIGKILL ends it
		}
		pidFile := filepath.Join(t.TempDir(), "pid")
		done := make(chan struct{})
		var code int
		var errOut string
		go func() {
			defer close(done)
			code, _, errOut = redlockRun(t, masters, "exec", "--ttl", "1500ms", "--grace", "300ms", "job", "--",
				"sh", "-c", "echo $$ > "+pidFile+"; "+script)
		}()
		// Once the command runs, the lock vanishes from every master (an
		// operator deleted it): the next extension finds it gone.
		waitFor(t, func() bool { _, err := os.Stat(pidFile); return err == nil })
		for _, s := range servers {
			if _, err := s.Do("DEL", "job"); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("redlock exec did not end after the lock was lost")
		}
		if code != exitLost {
			t.Fatalf("ignoreTerm=%v: exit %d, want %d; stderr: %s", ignoreTerm, code, exitLost, errOut)
		}
		if !strings.Contains(errOut, "lost while the command ran") || (ignoreTerm && !strings.Contains(errOut, "SIGKILL")) {
			t.Errorf("ignoreTerm=%v: stderr: %s", ignoreTerm, errOut)
		}
		b, _ := os.ReadFile(pidFile)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if pid == 0 || processAlive(pid) {
			t.Errorf("ignoreTerm=%v: the command (pid %d) is still running", ignoreTerm, pid)
		}
	}
}

func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// A zombie (state Z) has ended.
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, "the condition", cond)
}

func TestUsageErrors(t *testing.T) {
	masters := addrsOf(redistest.Start(t, 1))
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"exec"},
		{"exec", "job"},
		{"exec", "job", "--"},
		{"exec", "--ttl", "0s", "job", "--", "true"},
		{"exec", "--grace", "-1s", "job", "--", "true"},
		{"status"},
		{"doctor", "extra"},
		{"bench", "--clients", "0"},
	} {
		if code, _, errOut := redlockRun(t, masters, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d; stderr: %s", args, code, exitUsage, errOut)
		}
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"status", "k"}, &out, &errOut); code != exitUsage && os.Getenv("REDLOCK_MASTERS") == "" {
		t.Errorf("no masters: exit %d; %s", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), "REDLOCK_MASTERS") {
		t.Errorf("no masters: stderr does not say how to give them: %s", errOut.String())
	}
	// A URL with a password: the password never shows, even in errors.
	errOut.Reset()
	code := run(context.Background(), []string{"--masters", "redis://u:s3cret@127.0.0.1:1/0", "doctor"}, &out, &errOut)
	if code == exitOK || strings.Contains(errOut.String()+out.String(), "s3cret") {
		t.Errorf("exit %d, output %q %q", code, out.String(), errOut.String())
	}
	if code, _, _ := redlockRun(t, masters, "help"); code != exitOK {
		t.Errorf("help: exit %d", code)
	}
}

func TestStatus_showsHoldersPerMaster(t *testing.T) {
	servers := redistest.Start(t, 3)
	masters := addrsOf(servers)
	c, err := redigo.NewFromAddrs(masters)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	l, err := c.Acquire(ctx, "job", redlock.WithTTL(time.Minute), redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	rl, _ := c.NewReentrant("nested", "owner-1")
	_ = rl.Acquire(ctx)
	_ = rl.Acquire(ctx)
	r1, _ := c.AcquireRead(ctx, "doc")
	defer r1.Release(ctx)
	defer rl.Release(ctx)
	defer rl.Release(ctx)
	// Each call returns at a quorum; the table names every master, so
	// wait, bounded, until the last SET of each has run on all three.
	redistest.Eventually(t, 10*time.Second, "every master holding job, nested (twice) and doc", func() bool {
		for _, s := range servers {
			for _, k := range []string{"job", "nested", "doc"} {
				if n, err := redis.Int(s.Do("EXISTS", k)); err != nil || n != 1 {
					return false
				}
			}
			if n, err := redis.Int(s.Do("HGET", "nested", "owner-1")); err != nil || n != 2 {
				return false
			}
		}
		return true
	})

	code, out, errOut := redlockRun(t, masters, "status", "job", "nested", "doc", "free")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"held by " + l.Token()[:8] + "… on 3 of 3 masters",
		fmt.Sprintf("lock  %s…", l.Token()[:8]),
		"reentrant",
		"owner-1×2",
		"1 readers",
		"free on a quorum",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`[0-9.]+s\s+1\s`).MatchString(out) {
		t.Errorf("status lacks the TTL and fence counter of job:\n%s", out)
	}
	// A master down is shown as such, its error below the table, and a
	// quorum still answered: a warning, exit 0.
	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = redlockRun(t, masters, "status", "job")
	if code != exitOK || !strings.Contains(out, servers[2].Addr()+"  no (below)") ||
		!strings.Contains(out, "did not answer (asked once, skipped for the keys after):\n  master 2 ("+servers[2].Addr()+"): ") ||
		!strings.Contains(errOut, "warning: 1 of 3 masters did not answer") {
		t.Errorf("exit %d, output:\n%s%s", code, out, errOut)
	}
	// The error does not widen the table: the header is as wide as with
	// every master up.
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "reachable") && len(line) > 80 {
			t.Errorf("the table stretches to an error:\n%s", out)
		}
	}
	// Two of three down: no quorum answered, the state is unknown: 69.
	if err := servers[1].Kill(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = redlockRun(t, masters, "status", "job")
	if code != exitUnavailable || !strings.Contains(out, "unknown: only 1 of 3 masters answered") {
		t.Errorf("exit %d, output:\n%s%s", code, out, errOut)
	}
}

func TestDoctor_verdicts(t *testing.T) {
	good := redistest.StartOne(t, redistest.WithAOF())
	plain := redistest.StartOne(t)
	evicting := redistest.StartOne(t, redistest.WithAOF(), redistest.WithConfig("maxmemory-policy", "allkeys-lru"))
	replica := redistest.StartOne(t, redistest.WithConfig("replicaof", "127.0.0.1", strings.Split(good.Addr(), ":")[1]))
	noConfig := redistest.StartOne(t, redistest.WithConfig("rename-command", "CONFIG", `""`))

	verdict := func(out, addr string) string {
		lines := strings.Split(out, "\n")
		for i, l := range lines {
			if l == addr {
				for _, v := range lines[i+1:] {
					if v = strings.TrimSpace(v); strings.HasPrefix(v, "OK") || strings.HasPrefix(v, "WARN") || strings.HasPrefix(v, "FAIL") {
						return v
					}
				}
			}
		}
		return ""
	}
	code, out, errOut := redlockRun(t, []string{good.Addr(), plain.Addr(), noConfig.Addr()}, "doctor")
	if code != exitOK {
		t.Fatalf("exit %d without a failing master:\n%s%s", code, out, errOut)
	}
	for addr, want := range map[string]string{
		good.Addr():     "OK",
		plain.Addr():    "WARN: no AOF",
		noConfig.Addr(): "WARN: CONFIG is not permitted",
	} {
		if v := verdict(out, addr); !strings.HasPrefix(v, want) {
			t.Errorf("%s: verdict %q, want %q\n%s", addr, v, want, out)
		}
	}
	if !strings.Contains(out, "appendonly yes, appendfsync always, maxmemory-policy noeviction") {
		t.Errorf("doctor does not show the settings:\n%s", out)
	}
	code, out, _ = redlockRun(t, []string{evicting.Addr(), replica.Addr(), "127.0.0.1:1"}, "doctor")
	if code != exitFailure {
		t.Errorf("exit %d with failing masters", code)
	}
	for addr, want := range map[string]string{
		evicting.Addr(): "FAIL: maxmemory-policy allkeys-lru can evict held locks",
		replica.Addr():  `FAIL: role is "slave"`,
		"127.0.0.1:1":   "FAIL: unreachable",
	} {
		if v := verdict(out, addr); !strings.HasPrefix(v, want) {
			t.Errorf("%s: verdict %q, want %q\n%s", addr, v, want, out)
		}
	}
}

func TestBench_summary(t *testing.T) {
	masters := addrsOf(redistest.Start(t, 3))
	code, out, errOut := redlockRun(t, masters, "bench", "--duration", "500ms", "--clients", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !regexp.MustCompile(`3 masters, 2 clients, .*: [1-9][0-9]* cycles \([0-9]+/s\), p50 .*, p99 .*, 0 failures`).MatchString(out) {
		t.Errorf("summary: %q", out)
	}

}

func TestTLSFlags(t *testing.T) {
	certs := redistest.NewCerts(t)
	servers := redistest.Start(t, 3, redistest.WithTLS(certs, true))
	masters := addrsOf(servers)
	tlsArgs := []string{"--tls-ca", certs.CAFile, "--tls-cert", certs.CertFile, "--tls-key", certs.KeyFile}
	code, out, errOut := redlockRun(t, masters, append(tlsArgs, "exec", "job", "--", "true")...)
	if code != 0 {
		t.Fatalf("exec over TLS: exit %d: %s%s", code, out, errOut)
	}
	code, out, _ = redlockRun(t, masters, append(tlsArgs[:2], "doctor")...)
	if code != exitFailure || !strings.Contains(out, "FAIL: unreachable") {
		t.Errorf("without the client certificate: exit %d\n%s", code, out)
	}
	code, out, _ = redlockRun(t, masters, "--tls-ca", certs.OtherCAFile, "doctor")
	if code != exitFailure || !strings.Contains(out, "certificate signed by unknown authority") {
		t.Errorf("wrong CA: exit %d\n%s", code, out)
	}
	if code, _, errOut := redlockRun(t, masters, "--tls-cert", certs.CertFile, "doctor"); code != exitUsage || !strings.Contains(errOut, "both") {
		t.Errorf("a certificate without its key: exit %d: %s", code, errOut)
	}
}
