package rueidis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lib "github.com/redis/rueidis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// Locks through New on one and on five masters: a lock, a fenced one, a
// read-write pair, an extension and a release; the middleware around each
// client sees the lock's commands (the scripts' EVALSHA, the SCRIPT LOAD
// ahead of them, and with several masters the identity probe's INFO).
func TestNew_locksOnOneAndFiveMasters(t *testing.T) {
	for _, n := range []int{1, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			ms := startMasters(t, n)
			c := newClient(t, ms.clients)
			ctx := ctxFor(t)
			l, err := c.Acquire(ctx, "job", redlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.TryAcquire(ctx, "job"); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("a second holder: %v, want ErrNotAcquired", err)
			}
			if err := l.Extend(ctx, 20*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			f, err := c.Acquire(ctx, "fenced", redlock.WithFencing())
			if err != nil {
				t.Fatal(err)
			}
			if f.Token() == "" {
				t.Error("a fenced lock without a fencing token")
			}
			_ = f.Release(ctx)
			r1, err := c.AcquireRead(ctx, "doc")
			if err != nil {
				t.Fatal(err)
			}
			r2, err := c.AcquireRead(ctx, "doc")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.TryAcquireWrite(ctx, "doc"); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("a writer beside two readers: %v, want ErrNotAcquired", err)
			}
			_ = r1.Release(ctx)
			_ = r2.Release(ctx)
			// Calls return at a quorum: wait for every master's middleware.
			names := []string{"evalsha", "script", "info"}
			if n == 1 {
				names = names[:2] // one master is not identified: no INFO
			}
			seenAll := func() bool {
				for _, s := range ms.seen {
					for _, name := range names {
						if s.get(name) == 0 {
							return false
						}
					}
				}
				return true
			}
			if !redistest.WaitFor(ctx, seenAll) {
				for i, s := range ms.seen {
					t.Errorf("master %d's middleware saw evalsha %d, script %d, info %d", i, s.get("evalsha"), s.get("script"), s.get("info"))
				}
			}
		})
	}
}

// A waiter is woken by the holder's release notice, through the
// subscription on the client's own connection, long before its fallback
// poll would have found the key free.
func TestNew_waiterWokenByReleaseNotice(t *testing.T) {
	ms := startMasters(t, 3)
	c := newClient(t, ms.clients)
	ctx := ctxFor(t)
	l, err := c.Acquire(ctx, "wake", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := c.Acquire(ctx, "wake", redlock.WithWait(30*time.Second))
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	// Release once the waiter is subscribed on every master.
	subscribedEverywhere(t, ctx, ms.servers)
	start := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the waiter took %v after the release", took)
	}
}

// Over RESP2 (ClientOption.AlwaysRESP2): a lock, a waiter woken by the
// release notice on the dedicated connection, Inspect, and the identity
// check (INFO's reply is a bulk string there, a verbatim string over RESP3).
func TestNew_overRESP2(t *testing.T) {
	servers := redistest.Start(t, 3)
	resp2 := func(o *lib.ClientOption) { o.AlwaysRESP2 = true }
	clients := make([]lib.Client, len(servers))
	for i, s := range servers {
		clients[i] = dial(t, s.Addr(), resp2)
	}
	c := newClient(t, clients)
	ctx := ctxFor(t)
	l, err := c.Acquire(ctx, "r2", redlock.WithTTL(time.Minute), redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	inspectHeldEverywhere(t, ctx, c, "r2")
	got := make(chan error, 1)
	go func() {
		w, err := c.Acquire(ctx, "r2", redlock.WithWait(30*time.Second))
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	subscribedEverywhere(t, ctx, servers)
	start := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the waiter took %v after the release", took)
	}
	_, port, _ := net.SplitHostPort(servers[0].Addr())
	twice := newClient(t, []lib.Client{clients[0], dial(t, "localhost:"+port, resp2), clients[1]})
	if _, err := twice.TryAcquire(ctx, "twice"); !errors.Is(err, redlock.ErrInvalid) {
		t.Fatalf("a server given twice: %v, want ErrInvalid", err)
	}
}

// Inspect through the transport reads the holder of a lock.
func TestTransport_Inspect_readsTheHolder(t *testing.T) {
	ms := startMasters(t, 3)
	c := newClient(t, ms.clients)
	ctx := ctxFor(t)
	l, err := c.Acquire(ctx, "seen", redlock.WithTTL(time.Minute), redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	inspectHeldEverywhere(t, ctx, c, "seen")
}

// inspectHeldEverywhere waits until Inspect reads one holder of key on
// every master (the acquisition returned at a quorum: the others may
// still be setting it), failing t when they do not within ctx.
func inspectHeldEverywhere(t *testing.T, ctx context.Context, c *redlock.Client, key string) {
	t.Helper()
	var last redlock.Inspection
	if !redistest.WaitFor(ctx, func() bool {
		in, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		last = in
		for _, m := range in.Masters {
			if m.Err != nil || len(m.State.Holders) != 1 {
				return false
			}
		}
		return true
	}) {
		for _, m := range last.Masters {
			t.Errorf("master %s: %+v, %v: want one holder", m.Addr, m.State, m.Err)
		}
	}
}

// The identity check: one server given twice under two names is found out
// by its run_id, and the calls fail naming both.
func TestNew_sameServerTwiceIsRefused(t *testing.T) {
	s := redistest.StartOne(t)
	_, port, _ := net.SplitHostPort(s.Addr())
	c := newClient(t, []lib.Client{dial(t, s.Addr()), dial(t, "localhost:"+port), startMasters(t, 1).clients[0]})
	_, err := c.TryAcquire(ctxFor(t), "twice")
	if !errors.Is(err, redlock.ErrInvalid) {
		t.Fatalf("a server given twice: %v, want ErrInvalid", err)
	}
}

// One of five masters SIGSTOPped: locks are still granted, each in about
// the per-master timeout at most, and Close returns within a bound.
func TestNew_stoppedMaster(t *testing.T) {
	ms := startMasters(t, 5)
	c, err := New(ms.clients, redlock.WithTimeout(lockTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	l, err := c.Acquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	if err := ms.servers[4].Pause(); err != nil {
		t.Fatal(err)
	}
	defer ms.servers[4].Resume()
	for i := 0; i < 5; i++ {
		start := time.Now()
		l, err := c.Acquire(ctx, fmt.Sprintf("frozen-%d", i))
		if err != nil {
			t.Fatalf("acquisition %d with one master stopped: %v", i, err)
		}
		if took := time.Since(start); took > 3*lockTimeout+time.Second {
			t.Errorf("acquisition %d took %v", i, took)
		}
		_ = l.Release(ctx)
	}
	done := make(chan struct{})
	go func() {
		c.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs on a stopped master")
	}
}

// The lone master SIGSTOPped: an acquisition fails with the master's
// timeout, not later than a bound.
func TestNew_stoppedLoneMaster(t *testing.T) {
	ms := startMasters(t, 1)
	c := newClient(t, ms.clients)
	ctx := ctxFor(t)
	l, err := c.Acquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	if err := ms.servers[0].Pause(); err != nil {
		t.Fatal(err)
	}
	defer ms.servers[0].Resume()
	start := time.Now()
	_, err = c.TryAcquire(ctx, "frozen")
	if err == nil {
		t.Fatal("a lock granted by a stopped master")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the acquisition took %v", took)
	}
}

// No retry re-sends a lock command: a master that closes the connection
// after running the command (a proxy that forwards it, then drops the
// client) runs it once; the command fails, sent. A command that allows a
// re-send (Command.Resend) is sent once more by the transport, and says
// so. rueidis's own retries stay on (DisableRetry false, its default).
func TestTransport_closedConnectionIsNotRetried(t *testing.T) {
	s := redistest.StartOne(t)
	for _, resend := range []bool{false, true} {
		t.Run(fmt.Sprintf("Resend=%v", resend), func(t *testing.T) {
			key := fmt.Sprintf("runs-%v", resend)
			p := startDropper(t, s.Addr(), "INCR")
			c := dial(t, p.addr())
			tr := NewTransport(c)
			defer tr.Close()
			type outcome struct {
				v    any
				err  error
				info transport.SendInfo
			}
			got := make(chan outcome, 1)
			tr.Send(&transport.Command{Name: "INCR", Args: []any{key}, NumKeys: 1, Reply: transport.ReplyFlag,
				Deadline: time.Now().Add(2 * time.Second), Resend: resend,
				Done: func(v any, err error, info transport.SendInfo) { got <- outcome{v, err, info} }})
			o := <-got
			runs, err := s.Do("GET", key)
			if err != nil {
				t.Fatal(err)
			}
			want := "1"
			if resend {
				want = "2"
			}
			if string(runs.([]byte)) != want {
				t.Fatalf("the command ran %s times, want %s", runs, want)
			}
			if !o.info.Sent {
				t.Error("a command the master ran reported unsent")
			}
			if !resend && (o.err == nil || o.info.Resent) {
				t.Errorf("got %v, %v, %+v: want an error, not resent", o.v, o.err, o.info)
			}
			if resend && (o.err == nil || !o.info.Resent) {
				// The second try is dropped as well: an error, resent.
				t.Errorf("got %v, %v, %+v: want the second try's error, resent", o.v, o.err, o.info)
			}
		})
	}
}

// dropper is a TCP proxy to a redis-server that, when a client sends a
// command named drop, forwards it, waits for the master's reply, and then
// closes the client's connection without passing the reply on.
type dropper struct {
	l    net.Listener
	wg   sync.WaitGroup
	hits atomic.Int64
}

func startDropper(t *testing.T, target, drop string) *dropper {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropper{l: l}
	var conns sync.Map
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				p.serve(c, target, drop)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		p.wg.Wait()
	})
	return p
}

func (p *dropper) addr() string { return p.l.Addr().String() }

// serve relays c to the target: a read from the client that names drop
// is forwarded, and once the master's reply to it comes (the master ran
// it), c is closed without the reply.
func (p *dropper) serve(c net.Conn, target, drop string) {
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	var dropping atomic.Bool
	answered := make(chan struct{})
	go func() {
		rb := make([]byte, 64<<10)
		for {
			n, err := up.Read(rb)
			if err != nil {
				return
			}
			if dropping.Load() {
				close(answered)
				return
			}
			if _, err := c.Write(rb[:n]); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		if indexFold(string(buf[:n]), drop) >= 0 {
			p.hits.Add(1)
			dropping.Store(true)
			if _, err := up.Write(buf[:n]); err != nil {
				return
			}
			select {
			case <-answered:
			case <-time.After(5 * time.Second):
			}
			return
		}
		if _, err := up.Write(buf[:n]); err != nil {
			return
		}
	}
}

func indexFold(a, s string) int {
	for i := 0; i+len(s) <= len(a); i++ {
		match := true
		for j := 0; j < len(s); j++ {
			x, y := a[i+j], s[j]
			if x|0x20 != y|0x20 {
				match = false
				break
			}
		}
		if match {
			return i
		}
	}
	return -1
}

// subscribedEverywhere waits until every server has a subscriber (a
// waiter's release-notice subscription).
func subscribedEverywhere(t *testing.T, ctx context.Context, servers []*redistest.Server) {
	t.Helper()
	if !redistest.WaitFor(ctx, func() bool {
		for _, s := range servers {
			v, err := s.Do("PUBSUB", "CHANNELS", "*")
			if a, _ := v.([]any); err != nil || len(a) == 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the waiter did not subscribe on every master")
	}
}
