//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package pool

import "syscall"

// peekFD reports whether the socket fd has bytes to read (or has been
// closed by the peer), without consuming them or blocking.
func peekFD(fd uintptr) bool {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err == nil && n >= 0
}
