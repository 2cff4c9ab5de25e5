package stoptest

import "syscall"

// childAttr makes the child die with its parent: the kernel kills it
// (SIGKILL, which ends a stopped process too) when the thread that
// started it ends, so a parent that dies between a stop and the SIGCONT
// (a test's timeout, a crash, kill -9) does not leave it stopped forever.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
