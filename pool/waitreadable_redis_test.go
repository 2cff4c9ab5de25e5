package pool_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

// waiter returns a guarded end of a pipe, its ReadWaiter, and the
// master's end.
func waiter(t *testing.T) (net.Conn, pool.ReadWaiter, net.Conn) {
	t.Helper()
	client, master := net.Pipe()
	t.Cleanup(func() { client.Close(); master.Close() })
	g := pool.GuardConn(client, pool.Limits{})
	rw, ok := g.(pool.ReadWaiter)
	if !ok {
		t.Fatalf("GuardConn's %T is not a ReadWaiter", g)
	}
	return g, rw, master
}

// readLine reads one line through g.
func readLine(t *testing.T, g net.Conn) string {
	t.Helper()
	_ = g.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(g).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// A wait that ends at its deadline consumes nothing: the reply that
// comes later is read whole.
func TestWaitReadable_deadlineConsumesNothing(t *testing.T) {
	g, rw, master := waiter(t)
	err := rw.WaitReadable(context.Background(), time.Now().Add(20*time.Millisecond))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WaitReadable: %v, want os.ErrDeadlineExceeded", err)
	}
	go master.Write([]byte("+OK\r\n"))
	if got := readLine(t, g); got != "+OK\r\n" {
		t.Fatalf("read %q after the wait, want +OK", got)
	}
}

// ctx's end ends the wait with ctx's error, and consumes nothing.
func TestWaitReadable_ctxEndsTheWait(t *testing.T) {
	g, rw, master := waiter(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	err := rw.WaitReadable(ctx, time.Now().Add(time.Hour))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitReadable: %v, want context.Canceled", err)
	}
	if err := rw.WaitReadable(ctx, time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitReadable with ctx ended: %v, want context.Canceled", err)
	}
	go master.Write([]byte(":12\r\n"))
	if got := readLine(t, g); got != ":12\r\n" {
		t.Fatalf("read %q after the wait, want :12", got)
	}
}

// The byte that ends the wait is passed on by the next read, with the
// rest of the reply.
func TestWaitReadable_firstBytesArePassedOn(t *testing.T) {
	g, rw, master := waiter(t)
	go func() {
		master.Write([]byte("$5\r\nhe"))
		time.Sleep(10 * time.Millisecond) // the subject: the reply arrives in two parts
		master.Write([]byte("llo\r\n"))
	}()
	if err := rw.WaitReadable(context.Background(), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// A second wait returns at once: something is there to pass on.
	if err := rw.WaitReadable(context.Background(), time.Now()); err != nil {
		t.Fatalf("second WaitReadable: %v, want nil (bytes held)", err)
	}
	_ = g.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(g)
	head, _ := br.ReadString('\n')
	body, err := br.ReadString('\n')
	if err != nil || head != "$5\r\n" || body != "hello\r\n" {
		t.Fatalf("read %q %q (%v), want $5 and hello", head, body, err)
	}
}

// Bytes that break the framing end the wait, and the next read reports
// the violation.
func TestWaitReadable_framingViolationIsReportedByTheRead(t *testing.T) {
	g, rw, master := waiter(t)
	go master.Write([]byte("?what\r\n"))
	if err := rw.WaitReadable(context.Background(), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	var pe *pool.ProtocolError
	if _, err := g.Read(make([]byte, 16)); !errors.As(err, &pe) {
		t.Fatalf("read after a bad byte: %v, want a *pool.ProtocolError", err)
	}
}

// A master that closes the connection ends the wait; the read reports
// the end.
func TestWaitReadable_closedConnectionIsReportedByTheRead(t *testing.T) {
	g, rw, master := waiter(t)
	master.Close()
	if err := rw.WaitReadable(context.Background(), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Read(make([]byte, 16)); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the master closed: %v, want io.EOF", err)
	}
}

// A RedisPool's DialWaiter gives the connection's waiter; a reply waited
// for, then received through redigo, is whole; a wait that timed out
// leaves the connection usable.
func TestRedisPool_DialWaiter(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	p := s.Pool()
	ctx := context.Background()
	c, rw, err := p.DialWaiter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if rw == nil {
		t.Fatal("DialWaiter gave no ReadWaiter for a guarded connection")
	}
	if err := rw.WaitReadable(ctx, time.Now().Add(10*time.Millisecond)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("wait with nothing sent: %v, want os.ErrDeadlineExceeded", err)
	}
	if err := c.Send("ECHO", "quorum"); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := rw.WaitReadable(ctx, time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	v, err := redis.String(redis.ReceiveWithTimeout(c, 5*time.Second))
	if err != nil || v != "quorum" {
		t.Fatalf("ECHO: %q, %v", v, err)
	}

	// A dial option of the caller's that replaces the guarded dial
	// leaves the connection without a waiter.
	plain, err := pool.New(s.Addr(), pool.WithDialOptions(redis.DialContextFunc(func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	c2, rw2, err := plain.DialWaiter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if rw2 != nil {
		t.Error("a connection the caller's dial made has a waiter")
	}
}

// A reply that has only begun to arrive does not end the wait: the
// caller would then block in its read for the rest, past its deadline
// and ctx. The wait ends at its deadline with the bytes kept, and the
// next read passes the whole reply on once the rest has come.
func TestWaitReadable_partReplyWaitsForTheRest(t *testing.T) {
	g, rw, master := waiter(t)
	go master.Write([]byte("$5\r\nhe"))
	err := rw.WaitReadable(context.Background(), time.Now().Add(50*time.Millisecond))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WaitReadable on a part of a reply: %v, want os.ErrDeadlineExceeded", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if err := rw.WaitReadable(ctx, time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitReadable on a part of a reply, ctx cancelled: %v, want context.Canceled", err)
	}
	go master.Write([]byte("llo\r\n+OK\r\n"))
	if err := rw.WaitReadable(context.Background(), time.Now().Add(5*time.Second)); err != nil {
		t.Fatalf("WaitReadable once the reply is whole: %v", err)
	}
	_ = g.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(g)
	head, _ := br.ReadString('\n')
	body, _ := br.ReadString('\n')
	next, err := br.ReadString('\n')
	if err != nil || head != "$5\r\n" || body != "hello\r\n" || next != "+OK\r\n" {
		t.Fatalf("read %q %q %q (%v), want $5, hello and +OK", head, body, next, err)
	}
}

// ReplyWaiting sees a reply that waits in the socket while nobody reads
// it, consumes none of it, and answers beside a read that is blocked.
func TestReplyPeeker_seesAReplyWaitingUnread(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	p := s.Pool()
	c, rw, err := p.DialWaiter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peek, ok := rw.(pool.ReplyPeeker)
	if !ok {
		t.Fatalf("the ReadWaiter of a RedisPool connection (%T) is not a ReplyPeeker", rw)
	}
	if peek.ReplyWaiting() {
		t.Fatal("a reply waits with nothing sent")
	}
	if err := c.Send("ECHO", "quorum"); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !peek.ReplyWaiting() {
		if time.Now().After(deadline) {
			t.Fatal("the ECHO's reply never showed as waiting")
		}
		time.Sleep(time.Millisecond) // polls, bounded by the deadline above
	}
	v, err := redis.String(redis.ReceiveWithTimeout(c, 5*time.Second))
	if err != nil || v != "quorum" {
		t.Fatalf("ECHO after the peek: %q, %v (the peek consumed it?)", v, err)
	}
	if peek.ReplyWaiting() {
		t.Fatal("a reply still waits after it was read")
	}
	// Beside a blocked read: the peek must not wait for the reader.
	read := make(chan error, 1)
	go func() {
		_, err := redis.ReceiveWithTimeout(c, 5*time.Second)
		read <- err
	}()
	redistest.Eventually(t, 10*time.Second, "the reader blocked in its read", func() bool {
		return redistest.Goroutines("IO wait", "TestReplyPeeker_seesAReplyWaitingUnread.", "ReceiveWithTimeout(") > 0
	})
	done := make(chan bool, 1)
	go func() { done <- peek.ReplyWaiting() }()
	select {
	case w := <-done:
		if w {
			t.Error("a reply waits though nothing more was sent")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("ReplyWaiting blocked behind the reader")
	}
	if err := c.Send("PING"); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatalf("the blocked read: %v", err)
	}
}
