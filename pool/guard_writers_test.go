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
	readNow := make(chan struct{})
	served := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		served <- c
		<-readNow
		_, _ = io.CopyN(io.Discard, c, 16<<20) // A's bytes; then it stops reading
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	g := pool.GuardConn(raw, pool.Limits{})
	defer g.Close()
	srv := <-served
	defer srv.Close()
	aDone := make(chan error, 1)
	bDone := make(chan error, 1)
	go func() { _, err := g.Write(make([]byte, 16<<20)); aDone <- err }() // more than the socket buffers: waits for the peer
	time.Sleep(50 * time.Millisecond)
	go func() { _, err := g.Write(make([]byte, 128<<20)); bDone <- err }() // waits behind A
	time.Sleep(100 * time.Millisecond)
	close(readNow)
	select {
	case err := <-aDone:
		if err != nil {
			t.Fatalf("writer A: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("writer A did not finish")
	}
	time.Sleep(100 * time.Millisecond) // B writes, and waits
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
