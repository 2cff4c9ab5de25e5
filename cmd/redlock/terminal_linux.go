package main

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// isTerminal reports whether w is a terminal (a file whose TCGETS ioctl
// succeeds): progress drawn with \r belongs there and not in a log.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
