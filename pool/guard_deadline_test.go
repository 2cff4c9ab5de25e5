package pool_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/pool"
)

// The guard sets deadlines on the socket lazily (at its next read or
// write): every read and write must still run under the deadline last
// asked for, and one asked for during a read or write must reach it.

// A read deadline set before a read bounds that read.
func TestGuardDeadline_setBeforeAReadBoundsIt(t *testing.T) {
	g, _, _ := waiter(t)
	if err := g.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := g.Read(make([]byte, 16))
		done <- err
	}()
	endsAtDeadline(t, done, "a read with a deadline 20 ms away")
}

// enteredPipe returns, as waiter does, a guard over a pipe and the pipe's
// other end, and the enteredConn between them, whose channels say (up to
// four unreceived each) when a read or write of the pipe begins: the
// guard counts it as under way by then, so a deadline asked for after
// that is asked for during it.
func enteredPipe(t *testing.T) (net.Conn, *enteredConn, net.Conn) {
	t.Helper()
	client, master := net.Pipe()
	t.Cleanup(func() { client.Close(); master.Close() })
	ec := &enteredConn{Conn: client, entered: make(chan struct{}, 4), reads: make(chan struct{}, 4)}
	return pool.GuardConn(ec, pool.Limits{}), ec, master
}

// endsAtDeadline waits up to 5 s for what is ended (a read or write) to
// return its error on done, which must be the deadline's.
func endsAtDeadline(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: ended with %v, want os.ErrDeadlineExceeded", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still waits after 5 s", what)
	}
}

// A deadline set while a read waits (from another goroutine) ends it, as
// net.Conn promises; so does SetDeadline.
func TestGuardDeadline_setDuringAReadEndsIt(t *testing.T) {
	for _, set := range []struct {
		name string
		f    func(net.Conn, time.Time) error
	}{
		{"SetReadDeadline", net.Conn.SetReadDeadline},
		{"SetDeadline", net.Conn.SetDeadline},
	} {
		t.Run(set.name, func(t *testing.T) {
			g, ec, _ := enteredPipe(t)
			_ = g.SetReadDeadline(time.Time{})
			done := make(chan error, 1)
			go func() {
				_, err := g.Read(make([]byte, 16))
				done <- err
			}()
			waitFor(t, ec.reads, "the read of the pipe") // the guard counts it under way
			if err := set.f(g, time.Now()); err != nil {
				t.Fatal(err)
			}
			endsAtDeadline(t, done, "a read, by a deadline set during it")
		})
	}
}

// A write deadline bounds the next write; a later one replaces it.
func TestGuardDeadline_writeDeadline(t *testing.T) {
	g, ec, master := enteredPipe(t)
	if err := g.SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write([]byte("PING\r\n")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if err := g.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 16)
		n, _ := master.Read(b)
		got <- string(b[:n])
	}()
	if _, err := g.Write([]byte("PING\r\n")); err != nil {
		t.Fatalf("Write under a later deadline: %v", err)
	}
	if s := <-got; s != "PING\r\n" {
		t.Fatalf("the master read %q", s)
	}
	// A write that waits (nobody reads the pipe) ends at a deadline set
	// meanwhile.
	waitFor(t, ec.entered, "the first write above")
	waitFor(t, ec.entered, "the second write above")
	_ = g.SetWriteDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Write([]byte("PING\r\n"))
		done <- err
	}()
	waitFor(t, ec.entered, "the write to the pipe") // the guard counts it under way
	_ = g.SetWriteDeadline(time.Now())
	endsAtDeadline(t, done, "a write, by a deadline set during it")
}

// The read deadline WaitReadable sets is its own: the next read runs
// under the reader's deadline, also one the reader asked for before the
// wait.
func TestGuardDeadline_readAfterWaitReadableRunsUnderTheReadersDeadline(t *testing.T) {
	g, rw, master := waiter(t)
	_ = g.SetReadDeadline(time.Time{}) // none, asked before the wait
	if err := rw.WaitReadable(context.Background(), time.Now().Add(10*time.Millisecond)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WaitReadable: %v, want os.ErrDeadlineExceeded", err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond) // the subject: the read waits a spell, past the wait's deadline
		master.Write([]byte("+OK\r\n"))
	}()
	b := make([]byte, 16)
	n, err := g.Read(b)
	if err != nil || string(b[:n]) != "+OK\r\n" {
		t.Fatalf("Read after the wait: %q, %v; want +OK under no deadline", b[:n], err)
	}
}
