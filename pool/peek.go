package pool

import (
	"net"
	"syscall"
)

// A ReplyPeeker tells, without reading or blocking, whether bytes from the
// master wait unread in a connection's socket. A caller that sees a master
// silent for longer than it should be asks it before blaming the master:
// when this process did not run for a while (a busy machine, a stopped
// process), the master's replies wait in the socket and its reader has
// simply not run yet. The ReadWaiter of a RedisPool connection implements
// it (on Linux and the BSDs; elsewhere it always answers false).
type ReplyPeeker interface {
	ReplyWaiting() bool
}

// rawOf returns the socket under c for peeking, or nil.
func rawOf(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// ReplyWaiting reports whether bytes from the master wait in the socket
// (ReplyPeeker). It runs beside a blocked Read: it looks at the socket
// through its descriptor without taking the read side.
func (g *guardConn) ReplyWaiting() bool {
	if g.raw == nil {
		return false
	}
	waiting := false
	_ = g.raw.Control(func(fd uintptr) { waiting = peekFD(fd) })
	return waiting
}
