package pool_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

// The guard sets deadlines lazily. Every read and
// write must still run under the deadline last asked for, over TCP and
// TLS, with redigo's own timeouts, on pub/sub connections, and when the
// master stops answering.

// plainAndTLSMasters starts a plain master and a TLS one, each with a pool.
func plainAndTLSMasters(t *testing.T) map[string]*struct {
	s *redistest.Server
	p *pool.RedisPool
} {
	t.Helper()
	redistest.SkipShort(t)
	certs := redistest.NewCerts(t)
	plain := redistest.StartOne(t)
	tlsS := redistest.StartOne(t, redistest.WithTLS(certs, false))
	out := map[string]*struct {
		s *redistest.Server
		p *pool.RedisPool
	}{
		"tcp": {plain, plain.Pool(pool.WithConnectTimeout(5*time.Second), pool.WithWriteTimeout(time.Second))},
		"tls": {tlsS, tlsS.Pool(pool.WithTLS(tlsFiles(t, certs.CAFile, "", "", "127.0.0.1")),
			pool.WithConnectTimeout(5*time.Second), pool.WithWriteTimeout(time.Second))},
	}
	for _, m := range out {
		s := m.s
		t.Cleanup(func() { _ = s.Resume() })
	}
	return out
}

func dialGuarded(t *testing.T, p *pool.RedisPool) redis.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := p.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// isTimeout reports whether err is a read or write that ran out of time.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// A master that stops answering (SIGSTOP): redigo's DoWithTimeout,
// ReceiveWithTimeout and DoContext still end at the time asked for, after
// many commands whose deadlines were only noted (answered from bytes
// already read), over TCP and over TLS.
func TestGuard_stoppedMasterStillTimesOut(t *testing.T) {
	for name, m := range plainAndTLSMasters(t) {
		t.Run(name, func(t *testing.T) {
			c := dialGuarded(t, m.p)
			// Many pipelined commands: most deadlines are noted, not set.
			for i := 0; i < 200; i++ {
				if err := c.Send("PING"); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := redis.DoWithTimeout(c, 5*time.Second, ""); err != nil {
				t.Fatal(err)
			}
			// A long deadline noted last, then the master stops.
			if _, err := redis.DoWithTimeout(c, time.Hour, "PING"); err != nil {
				t.Fatal(err)
			}
			if err := m.s.Pause(); err != nil {
				t.Fatal(err)
			}
			defer m.s.Resume()
			for _, tc := range []struct {
				what string
				do   func(redis.Conn) error
			}{
				{"DoWithTimeout", func(c redis.Conn) error {
					_, err := redis.DoWithTimeout(c, 150*time.Millisecond, "PING")
					return err
				}},
				{"Send+ReceiveWithTimeout", func(c redis.Conn) error {
					if err := c.Send("PING"); err != nil {
						return err
					}
					if err := c.Flush(); err != nil {
						return err
					}
					_, err := redis.ReceiveWithTimeout(c, 150*time.Millisecond)
					return err
				}},
				{"DoContext", func(c redis.Conn) error {
					ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
					defer cancel()
					_, err := redis.DoContext(c, ctx, "PING")
					return err
				}},
			} {
				c := c
				if tc.what != "DoWithTimeout" {
					c = dialPausedGuarded(t, m)
				}
				start := time.Now()
				done := make(chan error, 1)
				go func() { done <- tc.do(c) }()
				select {
				case err := <-done:
					if !isTimeout(err) {
						t.Errorf("%s on a stopped master: %v, want a timeout", tc.what, err)
					}
					if el := time.Since(start); el > 3*time.Second {
						t.Errorf("%s with a 150 ms timeout took %v", tc.what, el)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s on a stopped master still waits after 10 s (150 ms asked for)", tc.what)
				}
			}
		})
	}
}

// dialPausedGuarded dials m while it is stopped: the TCP (and for TLS,
// the handshake) needs it running, so it runs for the dial and stops again.
func dialPausedGuarded(t *testing.T, m *struct {
	s *redistest.Server
	p *pool.RedisPool
}) redis.Conn {
	t.Helper()
	if err := m.s.Resume(); err != nil {
		t.Fatal(err)
	}
	c := dialGuarded(t, m.p)
	if _, err := redis.DoWithTimeout(c, 5*time.Second, "PING"); err != nil {
		t.Fatal(err)
	}
	if err := m.s.Pause(); err != nil {
		t.Fatal(err)
	}
	return c
}

// A pub/sub connection: a reader blocked in Receive under no deadline
// while another goroutine subscribes (under the pool's write timeout)
// hears the subscription and the message; a Receive asked to time out on
// a stopped master does; and Close ends a Receive blocked under no
// deadline, over TCP and TLS.
func TestGuard_pubsubReaderAndWriter(t *testing.T) {
	for name, m := range plainAndTLSMasters(t) {
		t.Run(name, func(t *testing.T) {
			c := dialGuarded(t, m.p)
			psc := redis.PubSubConn{Conn: c}
			got := make(chan any, 16)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					v := psc.ReceiveWithTimeout(0) // no deadline
					select {
					case got <- v:
					case <-stop:
						return
					}
					if _, ok := v.(error); ok {
						return
					}
				}
			}()
			redistest.Eventually(t, 10*time.Second, "the reader blocked in its read, no deadline", func() bool {
				return redistest.Goroutines("IO wait", "TestGuard_pubsubReaderAndWriter.", "ReceiveWithTimeout(") > 0
			})
			if err := psc.Subscribe("guarded"); err != nil {
				t.Fatal(err)
			}
			want := func(what string, ok func(any) bool) {
				t.Helper()
				select {
				case v := <-got:
					if !ok(v) {
						t.Fatalf("%s: got %#v", what, v)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: nothing after 10 s", what)
				}
			}
			want("subscription", func(v any) bool { s, ok := v.(redis.Subscription); return ok && s.Kind == "subscribe" })
			if _, err := m.s.Do("PUBLISH", "guarded", "hello"); err != nil {
				t.Fatal(err)
			}
			want("message", func(v any) bool { msg, ok := v.(redis.Message); return ok && string(msg.Data) == "hello" })
			// A PING from the writer while the reader waits, no deadline.
			if err := psc.Ping("p"); err != nil {
				t.Fatal(err)
			}
			want("pong", func(v any) bool { p, ok := v.(redis.Pong); return ok && p.Data == "p" })

			// The master stops: Close ends the reader blocked under no
			// deadline, and a write deadline noted meanwhile does not
			// matter.
			if err := m.s.Pause(); err != nil {
				t.Fatal(err)
			}
			if err := psc.Ping("q"); err != nil { // noted write deadline, written to the kernel
				t.Fatal(err)
			}
			start := time.Now()
			c.Close()
			want("the reader's error after Close", func(v any) bool { _, ok := v.(error); return ok })
			if el := time.Since(start); el > 3*time.Second {
				t.Errorf("Close ended the blocked reader after %v", el)
			}
			close(stop)
			wg.Wait()
			_ = m.s.Resume()

			// A pub/sub Receive asked to time out does so on a stopped master.
			c2 := dialGuarded(t, m.p)
			psc2 := redis.PubSubConn{Conn: c2}
			if err := psc2.Subscribe("guarded"); err != nil {
				t.Fatal(err)
			}
			if v := psc2.ReceiveWithTimeout(5 * time.Second); func() bool { _, ok := v.(redis.Subscription); return !ok }() {
				t.Fatalf("subscribe: %#v", v)
			}
			if err := m.s.Pause(); err != nil {
				t.Fatal(err)
			}
			start = time.Now()
			v := psc2.ReceiveWithTimeout(150 * time.Millisecond)
			if err, ok := v.(error); !ok || !isTimeout(err) {
				t.Fatalf("ReceiveWithTimeout on a stopped master: %#v, want a timeout", v)
			}
			if el := time.Since(start); el > 3*time.Second {
				t.Errorf("ReceiveWithTimeout(150ms) took %v", el)
			}
			_ = m.s.Resume()
		})
	}
}

// A deadline in the past asked for when the next reply is already in the
// guard's stash (WaitReadable read it): the read returns it, as a
// bufio.Reader returns bytes it holds whatever the deadline; the next
// read of the socket then fails at once under that deadline instead of
// waiting. redigo's Receive therefore behaves as over bufio alone.
func TestGuard_pastDeadlineWithTheReplyStashed(t *testing.T) {
	g, rw, master := waiter(t)
	go master.Write([]byte("+OK\r\n"))
	if err := rw.WaitReadable(context.Background(), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := g.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	n, err := g.Read(b)
	if err != nil || string(b[:n]) != "+OK\r\n" {
		t.Fatalf("stashed reply under a past deadline: %q, %v; want it returned", b[:n], err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := g.Read(b)
		done <- err
	}()
	endsAtDeadline(t, done, "the socket's next read under the past deadline")

	// Through redigo: the reply parsed from the stash, then a timeout.
	g2, rw2, master2 := waiter(t)
	c := redis.NewConn(g2, 0, 0)
	go master2.Write([]byte("+PONG\r\n"))
	if err := rw2.WaitReadable(context.Background(), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	v, err := redis.ReceiveWithTimeout(c, time.Nanosecond) // a deadline past by the read
	if err != nil || v != "PONG" {
		t.Fatalf("redigo receive of a stashed reply under a lapsed deadline: %v, %v", v, err)
	}
	start := time.Now()
	if _, err := redis.ReceiveWithTimeout(c, time.Nanosecond); !isTimeout(err) {
		t.Fatalf("redigo receive with nothing stashed: %v, want a timeout", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("took %v", el)
	}
}

// Closing the connection with a deadline noted but not yet set: reads
// and writes fail with net.ErrClosed at once, and setting a deadline
// afterwards does not make them wait.
func TestGuard_closeWithALazyDeadlinePending(t *testing.T) {
	g := silentGuardedConn(t)
	_ = g.SetReadDeadline(time.Now().Add(time.Hour))
	_ = g.SetWriteDeadline(time.Now().Add(time.Hour))
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	_ = g.SetDeadline(time.Time{})
	done := make(chan error, 2)
	go func() { _, err := g.Read(make([]byte, 8)); done <- err }()
	go func() { _, err := g.Write([]byte("PING\r\n")); done <- err }()
	for i := 0; i < 2; i++ {
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("after Close: %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a read or write on a closed guard waits")
		}
	}
}

// Deadlines set from many goroutines while a reader reads and a writer
// writes (-race): a deadline set last, now, ends the read every time,
// whichever moment of the read it lands on.
func TestGuard_concurrentDeadlines(t *testing.T) {
	g := silentGuardedConn(t)
	for i := 0; i < 200; i++ {
		_ = g.SetReadDeadline(time.Now().Add(time.Hour))
		done := make(chan error, 1)
		go func() {
			_, err := g.Read(make([]byte, 8))
			done <- err
		}()
		var wg sync.WaitGroup
		for j := 0; j < 4; j++ {
			wg.Add(1)
			go func(j int) {
				defer wg.Done()
				for k := 0; k < 20; k++ {
					_ = g.SetReadDeadline(time.Now().Add(time.Hour))
					_ = g.SetWriteDeadline(time.Now().Add(time.Hour))
					if j == 0 {
						_, _ = g.Write([]byte("PING\r\n"))
					}
				}
			}(j)
		}
		wg.Wait()
		_ = g.SetReadDeadline(time.Now())
		select {
		case err := <-done:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("round %d: read ended with %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: a read waits 5 s after a deadline of now was set last", i)
		}
	}
}

// silentGuardedConn returns a guarded TCP connection to a peer that reads
// everything and answers nothing; t.Cleanup closes both.
func silentGuardedConn(t *testing.T) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			io.Copy(io.Discard, c)
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	g := pool.GuardConn(raw, pool.Limits{})
	t.Cleanup(func() { g.Close() })
	return g
}
