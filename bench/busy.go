package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
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
