//go:build !linux

package stoptest

import "syscall"

// childAttr is nil where the kernel cannot kill a child with its parent
// (Pdeathsig is Linux's): there only Run's clean-up ends the child, and a
// parent killed outright leaves it behind.
func childAttr() *syscall.SysProcAttr { return nil }
