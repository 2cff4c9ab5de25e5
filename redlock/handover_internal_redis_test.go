package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// handOverClient is a Client of servers whose plain locks keep a line
// of waiters (Client.handOver); without line, one that runs the previous
// release's scripts.
func handOverClient(t *testing.T, servers []*redistest.Server, line bool, opts ...Option) *Client {
	t.Helper()
	c := leadClient(t, servers, true, append([]Option{WithTimeout(realTimeoutIn)}, opts...)...)
	c.handOver = line
	return c
}

// lineOf returns the waiter IDs in key's line on s.
func lineOf(t *testing.T, s *redistest.Server, key string) []string {
	t.Helper()
	ws, err := redis.Strings(s.Do("ZRANGE", lineKey(key), 0, -1))
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// lineHead waits until key's line holds one waiter on each of servers,
// the same, and it has waited twice handOverAge there; it returns its ID.
func lineHead(t *testing.T, servers []*redistest.Server, key string) string {
	t.Helper()
	var id string
	redistest.Eventually(t, 20*time.Second, "one waiter in line on every master", func() bool {
		id = ""
		for _, s := range servers {
			ws := lineOf(t, s, key)
			if len(ws) != 1 || id != "" && ws[0] != id {
				return false
			}
			id = ws[0]
		}
		return true
	})
	redistest.Eventually(t, 5*time.Second, "the waiter has waited twice handOverAge", func() bool {
		for _, s := range servers {
			arrival, err := redis.Int64(s.Do("ZSCORE", lineKey(key), id))
			now, err2 := redis.Int64s(s.Do("TIME"))
			if err != nil || err2 != nil || now[0]*1_000_000+now[1]-arrival < 2*handOverAge.Microseconds() {
				return false
			}
		}
		return true
	})
	return id
}

// notices subscribes to key's release notices on s and returns them as
// they come.
func notices(t *testing.T, s *redistest.Server, key string) <-chan string {
	t.Helper()
	c, err := redis.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	psc := redis.PubSubConn{Conn: c}
	if err := psc.Subscribe(wakeChannel(key)); err != nil {
		t.Fatal(err)
	}
	if _, ok := psc.ReceiveWithTimeout(10 * time.Second).(redis.Subscription); !ok {
		t.Fatal("no subscription")
	}
	out := make(chan string, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			switch m := psc.Receive().(type) {
			case redis.Message:
				select {
				case out <- string(m.Data):
				default:
				}
			case error:
				return
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return out
}

// A waiter whose attempt was refused joins the key's line on every
// master; once it has waited handOverAge, the holder's release hands the
// key over to it (the key holds its marker, and the notice names it), and
// the waiter, woken as the heir, gets the lock. Its release takes the
// line's keys away with the lock.
func TestHandOver_releaseHandsTheKeyToTheWaiterFirstInLine(t *testing.T) {
	servers := redistest.Start(t, 3)
	holder := handOverClient(t, servers, true)
	waiter := handOverClient(t, servers, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	heard := notices(t, servers[0], "hand")
	l, err := holder.Acquire(ctx, "hand", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		wl, err := waiter.Acquire(ctx, "hand", WithTTL(time.Minute), WithBackoff(10*time.Millisecond, 50*time.Millisecond))
		done <- result{wl, err}
	}()
	id := lineHead(t, servers, "hand")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want := l.Token()[:8] + "!h" + id[:8]
	select {
	case got := <-heard:
		if got != want {
			t.Errorf("the release announced %q, want the hand-over %q", got, want)
		}
	case <-ctx.Done():
		t.Fatal("no notice of the release")
	}
	var got result
	select {
	case got = <-done:
	case <-ctx.Done():
		t.Fatal("the waiter did not get the lock the release handed over to it")
	}
	if got.err != nil {
		t.Fatalf("the waiter's Acquire: %v", got.err)
	}
	if err := got.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "nothing left on any master", func() bool {
		for _, s := range servers {
			if n, err := redis.Int(s.Do("DBSIZE")); err != nil || n != 0 {
				return false
			}
		}
		return true
	})
}

// A waiter first in line whose process stopped (an entry nobody will
// refresh or take, put on every master here) is handed the key once: the
// marker keeps the key for it for markerMS, after which a live waiter
// gets it; the stopped waiter's entry is gone.
func TestHandOver_aStoppedHeirHoldsTheKeyUpOnce(t *testing.T) {
	servers := redistest.Start(t, 3)
	holder := handOverClient(t, servers, true)
	waiter := handOverClient(t, servers, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := holder.Acquire(ctx, "stopped", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		// Arrived long ago, deadline in a minute.
		now, err := redis.Int64s(s.Do("TIME"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Do("ZADD", lineKey("stopped"), now[0]*1_000_000-60_000_000, "stopped-waiter-id"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Do("ZADD", lineDeadlinesKey("stopped"), now[0]*1000+60_000, "stopped-waiter-id"); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		wl, err := waiter.Acquire(ctx, "stopped", WithTTL(time.Minute))
		if err == nil {
			err = wl.Release(ctx)
		}
		done <- err
	}()
	redistest.Eventually(t, 20*time.Second, "the live waiter in line on every master", func() bool {
		for _, s := range servers {
			if len(lineOf(t, s, "stopped")) != 2 {
				return false
			}
		}
		return true
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if v, err := redis.String(s.Do("GET", "stopped")); err == nil && v != "h:stopped-waiter-id" {
			t.Errorf("%s holds %q after the release, want the stopped waiter's marker (or it ran out)", s.Addr(), v)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the live waiter: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the live waiter never got the key the stopped one was handed")
	}
	for _, s := range servers {
		for _, w := range lineOf(t, s, "stopped") {
			if w == "stopped-waiter-id" {
				t.Errorf("%s keeps the stopped waiter in line", s.Addr())
			}
		}
	}
}

// Clients with the line and clients of the previous release (no line:
// SET NX, wait_acquire, release.lua) take turns on one key: no two ever
// hold it at once, and all of them get it.
func TestHandOver_linedAndPreviousClientsNeverBothHold(t *testing.T) {
	servers := redistest.Start(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var holders atomic.Int32
	var overlaps atomic.Int32
	var grants [8]atomic.Int32
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for i := range 8 {
		c := handOverClient(t, servers, i%2 == 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				l, err := c.Acquire(ctx, "mixed", WithTTL(8*time.Second))
				if err != nil {
					if !errors.Is(err, ErrNotAcquired) {
						t.Errorf("client %d: %v", i, err)
						return
					}
					continue
				}
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				grants[i].Add(1)
				time.Sleep(time.Millisecond) // the subject: a hold, for another client to overlap it
				holders.Add(-1)
				if err := l.Release(ctx); err != nil && !errors.Is(err, ErrNotReleased) {
					t.Errorf("client %d: release: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d grants while another client held the key", n)
	}
	for i := range grants {
		if grants[i].Load() == 0 {
			t.Errorf("client %d (line %v) never got the key", i, i%2 == 0)
		}
	}
	t.Logf("grants per client (even: with the line): %v", func() (g [8]int32) {
		for i := range grants {
			g[i] = grants[i].Load()
		}
		return
	}())
}

// With one master of three stopped (SIGSTOP), a release still hands the
// key over on the other two, whose notices make a quorum: the heir
// adopts its markers there and holds the lock; the stopped master, once
// it runs again, lets the next holder in.
func TestHandOver_heirGetsTheKeyWithAMasterStopped(t *testing.T) {
	servers := redistest.Start(t, 3)
	holder := handOverClient(t, servers, true)
	waiter := handOverClient(t, servers, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := holder.Acquire(ctx, "stop", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *Lock, 1)
	go func() {
		wl, err := waiter.Acquire(ctx, "stop", WithTTL(time.Minute), WithBackoff(10*time.Millisecond, 50*time.Millisecond))
		if err != nil {
			t.Errorf("the waiter's Acquire: %v", err)
		}
		done <- wl
	}()
	id := lineHead(t, servers, "stop")
	heard := notices(t, servers[0], "stop")
	paused(t, servers[2])
	if err := l.Release(ctx); err != nil && !errors.Is(err, ErrNotReleased) {
		t.Fatal(err)
	}
	select {
	case got := <-heard:
		if want := l.Token()[:8] + "!h" + id[:8]; got != want {
			t.Errorf("master 0 announced %q, want the hand-over %q", got, want)
		}
	case <-ctx.Done():
		t.Fatal("no notice of the release from master 0")
	}
	var wl *Lock
	select {
	case wl = <-done:
	case <-ctx.Done():
		t.Fatal("the heir did not get the lock with one master stopped")
	}
	if wl == nil {
		return
	}
	for _, s := range servers[:2] {
		if v, err := redis.String(s.Do("GET", "stop")); err != nil || v != wl.Token() {
			t.Errorf("%s holds %q (%v), want the heir's token", s.Addr(), v, err)
		}
	}
	if err := servers[2].Resume(); err != nil {
		t.Fatal(err)
	}
	if err := wl.Release(ctx); err != nil && !errors.Is(err, ErrNotReleased) {
		t.Fatal(err)
	}
	next, err := holder.Acquire(ctx, "stop", WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("the next holder after the master ran again: %v", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
