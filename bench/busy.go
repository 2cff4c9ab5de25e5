package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// spinFlag is the hidden flag with which the bench re-executes itself as
// a busy loop: one process per core, each spinning on one thread, as
// other programs keeping the CPUs busy would.
const spinFlag = "-bench-spin"

// spin burns one core until its parent goes away (the bench kills it; the
// kernel does too, by Pdeathsig; the check of the parent is the last
// resort).
func spin() {
	ppid := os.Getppid()
	x := uint64(1)
	for i := 0; ; i++ {
		x = x*6364136223846793005 + 1442695040888963407
		if i%(1<<24) == 0 && os.Getppid() != ppid {
			os.Exit(int(x & 1))
		}
	}
}

// busy is a set of busy-loop processes, one per core.
type busy struct {
	procs []*exec.Cmd
}

// startBusy starts one spinning process per core. stop must be called.
func startBusy() (*busy, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b := &busy{}
	for i := 0; i < runtime.NumCPU(); i++ {
		cmd := exec.Command(self, spinFlag)
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			b.stop()
			return nil, fmt.Errorf("bench: busy loop: %w", err)
		}
		b.procs = append(b.procs, cmd)
	}
	time.Sleep(200 * time.Millisecond) // let them reach the scheduler's steady state
	return b, nil
}

// stop kills the busy loops and waits for them.
func (b *busy) stop() {
	if b == nil {
		return
	}
	for _, c := range b.procs {
		c.Process.Kill()
	}
	for _, c := range b.procs {
		c.Wait()
	}
	b.procs = nil
}

// loaded: 64 goroutines of one application on N=5, each locking a key of
// its own, with one busy loop per core running, on each of quorumlock's
// ways to reach the masters. Every lock is a single attempt (TryAcquire)
// with the default per-master timeout, so each attempt that fails is
// counted, and so is each release that is not confirmed. With every
// master up, both must be 0.
func loaded(ctx context.Context, e *env) string {
	var b strings.Builder
	b.WriteString("## 64 clients on N=5 with a busy loop per core\n\n")
	b.WriteString("64 goroutines share one instance, each looping TryAcquire + Release on a key of its own, while one spinning process per core keeps the CPUs busy. " +
		"Every master is up: a failed acquisition or a release that is not confirmed is the client failing under CPU load.\n\n")
	b.WriteString("| library | cycles/s | p50 ms | p99 ms | failed acquisitions | unconfirmed releases |\n|---|---|---|---|---|---|\n")
	bz, err := startBusy()
	if err != nil {
		panic(err)
	}
	defer bz.stop()
	for _, lb := range libs {
		if !lb.runs("busy") {
			continue
		}
		l := lb.make(e, 5)
		if l == nil {
			continue
		}
		if q, ok := l.(*qlLocker); ok {
			q.try = true
		}
		lockers := make([]locker, 64)
		for i := range lockers {
			lockers[i] = l
		}
		r := run(ctx, e, lockers, "bench:busy:"+lb.name, 0, 1, false)
		l.close()
		prefix := "busy " + lb.name
		e.metrics[prefix+" cycles"] = float64(r.cycles)
		e.metrics[prefix+" failed"] = float64(r.acqFailures)
		e.metrics[prefix+" unconfirmed"] = float64(r.relFailures)
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %d | %d |\n", lb.name, r.rate(), ms(r.pct(0.5)), ms(r.pct(0.99)), r.acqFailures, r.relFailures)
	}
	b.WriteString("\n")
	return b.String()
}
