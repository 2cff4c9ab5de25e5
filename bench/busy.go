package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
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

// startBusy starts n spinning processes (one per core: runtime.NumCPU()).
// stop must be called.
func startBusy(n int) (*busy, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b := &busy{}
	for i := 0; i < n; i++ {
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
		_ = c.Process.Kill() // an error: it has exited already
	}
	for _, c := range b.procs {
		_ = c.Wait() // "signal: killed", as asked
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
	b.WriteString("Beside each cell, two probes of this process show how late things run: a PING to the first master every 5 ms on a connection of its own (its p99 and worst round trip), " +
		"and a 1 ms timer (how late it fires, p99 and worst). quorumlock's per-master timeout is its default, 50 ms. After a failed acquisition or release the goroutine moves to a fresh key, so that what the failure left does not fail it again.\n\n")
	b.WriteString("| library | cycles/s | p50 ms | p99 ms | failed acquisitions | unconfirmed releases | probe PING p99 / worst ms | 1 ms timer late p99 / worst ms |\n|---|---|---|---|---|---|---|---|\n")
	bz, err := startBusy(runtime.NumCPU())
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
		pr := startProbes(e.addrs[0])
		r := run(ctx, e, lockers, "bench:busy:"+lb.name, 0, 1, false)
		ping, late := pr.stop()
		l.close()
		prefix := "busy " + lb.name
		e.metrics[prefix+" cycles"] = float64(r.cycles)
		e.metrics[prefix+" failed"] = float64(r.acqFailures)
		e.metrics[prefix+" unconfirmed"] = float64(r.relFailures)
		e.metrics[prefix+" probe p99"] = float64(percentile(ping, 0.99))
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %d | %d | %s / %s | %s / %s |\n", lb.name, r.rate(), ms(r.pct(0.5)), ms(r.pct(0.99)), r.acqFailures, r.relFailures,
			ms(percentile(ping, 0.99)), ms(percentile(ping, 1)), ms(percentile(late, 0.99)), ms(percentile(late, 1)))
	}
	b.WriteString("\n")
	return b.String()
}

// probes measure, while a cell runs, a master's round trip (a PING every
// 5 ms on a connection of its own) and how late a 1 ms timer fires.
type probes struct {
	quit       chan struct{}
	done       sync.WaitGroup
	ping, late []time.Duration
}

func startProbes(addr string) *probes {
	p := &probes{quit: make(chan struct{})}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		panic(err)
	}
	p.done.Add(2)
	go func() {
		defer p.done.Done()
		defer c.Close()
		rd := bufio.NewReader(c)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
			}
			t0 := time.Now()
			if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
				panic(err)
			}
			if _, err := rd.ReadString('\n'); err != nil {
				panic(err)
			}
			p.ping = append(p.ping, time.Since(t0))
		}
	}()
	go func() {
		defer p.done.Done()
		for {
			t0 := time.Now()
			select {
			case <-p.quit:
				return
			case <-time.After(time.Millisecond):
			}
			p.late = append(p.late, time.Since(t0)-time.Millisecond)
		}
	}()
	return p
}

func (p *probes) stop() (ping, late []time.Duration) {
	close(p.quit)
	p.done.Wait()
	return p.ping, p.late
}
