package pool_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/pool"
)

// net.Conn lets goroutines write at once; a deadline set while any of
// their writes waits must reach the socket. Writer A finishes while
// writer B, which began during A, still waits for the peer to read.
func TestGuard_deadlineDuringASecondWriterReachesIt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const aBytes = 16 << 20 // more than the socket buffers: A waits for the peer
	aWriting := make(chan struct{})
	readNow := make(chan struct{})
	served := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		served <- c
		// Only A writes until aWriting is closed: its first byte says it
		// holds the socket, which a write keeps until it is done.
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			return
		}
		close(aWriting)
		<-readNow
		_, _ = io.CopyN(io.Discard, c, aBytes-1) // the rest of A's bytes; then it stops reading
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ec := &enteredConn{Conn: raw, entered: make(chan struct{}, 2)}
	g := pool.GuardConn(ec, pool.Limits{})
	defer g.Close()
	srv := <-served
	defer srv.Close()
	aDone := make(chan error, 1)
	bDone := make(chan error, 1)
	go func() { _, err := g.Write(make([]byte, aBytes)); aDone <- err }()
	waitFor(t, aWriting, "first byte of writer A")
	<-ec.entered // A's
	go func() { _, err := g.Write(make([]byte, 128<<20)); bDone <- err }()
	waitFor(t, ec.entered, "start of writer B") // B is counted as writing, behind A
	close(readNow)
	select {
	case err := <-aDone:
		if err != nil {
			t.Fatalf("writer A: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("writer A did not finish")
	}
	// B's write reaches the socket and waits there (were it not there
	// yet, the deadline below would stop it as it got there).
	time.Sleep(100 * time.Millisecond) // the subject: a spell in which B must not end
	select {
	case err := <-bDone:
		t.Fatalf("writer B ended early: %v", err)
	default:
	}
	if err := g.SetWriteDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-bDone:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("writer B: %v, want os.ErrDeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("writer B still waits 5 s after a write deadline of now was set during it")
	}
}

// enteredConn says on entered each time a Write begins, and on reads
// (unless nil) each time a Read does (the guard has counted it as
// writing or reading by then).
type enteredConn struct {
	net.Conn
	entered chan struct{}
	reads   chan struct{}
}

func (c *enteredConn) Read(p []byte) (int, error) {
	if c.reads != nil {
		c.reads <- struct{}{}
	}
	return c.Conn.Read(p)
}

func (c *enteredConn) Write(p []byte) (int, error) {
	c.entered <- struct{}{}
	return c.Conn.Write(p)
}

// waitFor waits for ch, for at most 10 s.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
	}
}
