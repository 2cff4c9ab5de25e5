package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

// Attacks on a lone master's reply read by its caller (muxConn.readOwn).

// splitReplyProxy returns a proxy in front of s that answers the SET of
// key with its first byte only ("+"), closes split, and sends the rest
// ("OK\r\n") once gate closes, before it runs the SET: a master whose
// reply is cut between two TCP segments and then stalls (SIGSTOPped, or a
// network that drops the second segment for a while).
func splitReplyProxy(t *testing.T, s *redistest.Server, key string) (p *hostile.Proxy, split, gate chan struct{}) {
	split, gate = make(chan struct{}), make(chan struct{})
	p = hostile.NewProxy(t, s.Addr(), func(c *hostile.Conn, cmd []string) hostile.Verdict {
		if cmd[0] != "SET" || len(cmd) < 2 || cmd[1] != key {
			return hostile.Forward
		}
		_ = c.Write("+")
		close(split)
		select {
		case <-gate:
		case <-c.Quit():
			return hostile.Swallow
		}
		_ = c.Write("OK\r\n")
		return hostile.Swallow // it runs now, after its reply
	})
	return p, split, gate
}

// splitClient returns a pipelined client on the master behind p with the
// per-master timeout, its mux, warmed up so that the next round may be
// read by its caller.
func splitClient(t *testing.T, p *hostile.Proxy, timeout time.Duration) (*Client, redigot.MuxState) {
	t.Helper()
	pl, err := pool.New(p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pl.Close() })
	c, mx := loneMasterOn(t, pl, timeout)
	warmUp(t, c)
	return c, mx
}

// warmUp makes c's first contact (its rounds are served by the reader),
// so that the next round may be read by its caller.
func warmUp(t *testing.T, c *Client) {
	t.Helper()
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "atk:warm", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The first byte of the reply reaches the caller, the rest is late: the
// caller must still give up at its round's deadline and hand the reading
// back, as it does when no byte came (the reader then reads the reply,
// the late grant is rolled back, and the connection stays). A caller that
// reads on in receive, bounded by the stall bound instead of its
// deadline, breaks the connection at the stall bound, and the late grant
// is never rolled back.
func TestReadOwn_splitReplyDeadlineHandsBack(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	p, split, gate := splitReplyProxy(t, s, "atk:split")
	c, mx := splitClient(t, p, 200*time.Millisecond) // stall bound: 1s
	before := mx.OwnReads()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.TryAcquire(context.Background(), "atk:split", WithTTL(time.Minute))
		done <- err
	}()
	<-split
	err := <-done
	t.Logf("TryAcquire returned after %v: %v", time.Since(start), err)
	close(gate)
	if err == nil {
		t.Fatal("TryAcquire succeeded on a reply that came after its deadline")
	}
	// The late grant counts: rolled back on the same connection.
	waitGone(t, s, "atk:split", 10*time.Second)
	if p.LockConn(1) != nil {
		t.Errorf("a second lock connection was dialed: the late reply broke the first (its caller read past its deadline)")
	}
	// The rollback ran; its reply may not be read yet (a loaded machine),
	// and a caller reads its own reply only on an idle connection.
	waitIdle(t, mx, 10*time.Second)
	l, err := c.TryAcquire(context.Background(), "atk:split2", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if mx.OwnReads() <= before {
		t.Error("no reply read by its caller")
	}
}

// As above with ctx cancelled once the first byte arrived, and a
// per-master timeout of 10 s (stall bound 100 s): the caller must return
// with ctx's error long before either.
func TestReadOwn_splitReplyCancelEndsTheWait(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	p, split, gate := splitReplyProxy(t, s, "atk:splitc")
	c, _ := splitClient(t, p, 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.TryAcquire(ctx, "atk:splitc", WithTTL(time.Minute))
		done <- err
	}()
	<-split
	// Give the caller the time to take the first byte (a cancel before it
	// ends the wait with nothing read, which is handled).
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		close(gate) // lets it return
		<-done
		t.Fatal("TryAcquire went on waiting 30s after its ctx was cancelled: its caller reads a split reply up to the stall bound (100s), not its round deadline (10s)")
	}
	t.Logf("TryAcquire returned %v after the cancel: %v", time.Since(start), err)
	close(gate)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("TryAcquire: %v, want context.Canceled", err)
	}
	waitGone(t, s, "atk:splitc", 20*time.Second)
}

// Close while a caller waits for the rest of a split reply it reads
// itself: Close ends the wait (it fails the connection) once the grace of
// one per-master timeout has passed, the caller returns with an error,
// and no goroutine is left (goleak in TestMain).
func TestReadOwn_closeDuringSplitReplyWait(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	p, split, gate := splitReplyProxy(t, s, "atk:close")
	defer close(gate)
	c, mx := splitClient(t, p, time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := c.TryAcquire(context.Background(), "atk:close", WithTTL(time.Minute))
		done <- err
	}()
	<-split
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; err == nil {
		t.Fatal("TryAcquire succeeded across Close")
	}
	if n := mx.LiveConns(); n != 0 {
		t.Errorf("%d live connections after Close", n)
	}
}

// Callers whose ctx ends at about the moment their reply arrives: every
// late grant is rolled back (no key stays), the connection is never
// broken (the hand-back and the reader's reading race, not the stream),
// and the client goes on working.
func TestReadOwn_cancelAsTheReplyArrives(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	c, mx := loneMaster(t, s, 5*time.Second)
	ctx := context.Background()
	warmUp(t, c)
	var got, canceled int
	for i := range 300 {
		key := "atk:race:" + strconv.Itoa(i)
		cctx, cancel := context.WithCancel(ctx)
		tm := time.AfterFunc(time.Duration(i%30)*10*time.Microsecond, cancel)
		l, err := c.TryAcquire(cctx, key, WithTTL(time.Minute))
		tm.Stop()
		cancel()
		switch {
		case err == nil:
			got++
			if err := l.Release(ctx); err != nil {
				t.Fatalf("release %s: %v", key, err)
			}
		case errors.Is(err, context.Canceled):
			canceled++
		default:
			t.Fatalf("TryAcquire %s: %v", key, err)
		}
	}
	t.Logf("%d acquired, %d cancelled, %d replies read by their callers", got, canceled, mx.OwnReads())
	// late grants rolled back
	leftover.Within(t, 20*time.Second, []*redistest.Server{s})
	if n := mx.LiveConns(); n != 1 {
		t.Errorf("%d live connections, want 1 (none broken)", n)
	}
}

// Callers reading their own replies beside callers served by the reader,
// on plain, fair and read-write locks of a lone master, while the master
// is disrupted: its script cache flushed (NOSCRIPT), the client's
// connections killed (re-sent on a new one), the master SIGSTOPped for
// less than the per-master timeout. Each shared lock stays exclusive,
// and every caller gets through.
func TestReadOwn_mixedKindsUnderDisruption(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	c, mx := loneMaster(t, s, 300*time.Millisecond)
	warmUp(t, c)
	ctx := context.Background()
	stop := make(chan struct{})
	disrupted := make(chan int)
	go func() {
		n := 0
		defer func() { disrupted <- n }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			switch i % 3 {
			case 0:
				_, _ = s.Do("SCRIPT", "FLUSH")
			case 1:
				_, _ = s.Do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
			case 2:
				if s.Pause() == nil {
					time.Sleep(30 * time.Millisecond) // the subject: the master frozen for a spell, shorter than the per-master timeout
					_ = s.Resume()
				}
			}
			n++
		}
	}()
	type shared struct {
		name    string
		acquire func() (*Lock, error)
	}
	var plainHeld, fairHeld, writers, readers atomic.Int32
	var overlaps, releaseErrs atomic.Int32
	wait := []LockOption{WithWait(30 * time.Second), WithBackoff(2*time.Millisecond, 5*time.Millisecond)}
	kinds := []shared{
		{"plain", func() (*Lock, error) { return c.Acquire(ctx, "atk:mix:plain", wait...) }},
		{"fair", func() (*Lock, error) { return c.Acquire(ctx, "atk:mix:fair", append(wait, WithFair())...) }},
		{"write", func() (*Lock, error) { return c.AcquireWrite(ctx, "atk:mix:rw", wait...) }},
		{"read", func() (*Lock, error) { return c.AcquireRead(ctx, "atk:mix:rw", wait...) }},
	}
	hold := func(k string) func() {
		check := func(n int32) {
			if n > 1 {
				overlaps.Add(1)
			}
		}
		switch k {
		case "plain":
			check(plainHeld.Add(1))
			return func() { plainHeld.Add(-1) }
		case "fair":
			check(fairHeld.Add(1))
			return func() { fairHeld.Add(-1) }
		case "write":
			check(writers.Add(1))
			if readers.Load() > 0 {
				overlaps.Add(1)
			}
			return func() { writers.Add(-1) }
		default:
			readers.Add(1)
			if writers.Load() > 0 {
				overlaps.Add(1)
			}
			return func() { readers.Add(-1) }
		}
	}
	everyGoroutine(t, 8, func(g int) error {
		k := kinds[g%len(kinds)]
		for i := range 40 {
			l, err := k.acquire()
			if err != nil {
				return fmt.Errorf("%s goroutine %d, cycle %d: %w", k.name, g, i, err)
			}
			done := hold(k.name)
			time.Sleep(100 * time.Microsecond) // the subject: a hold long enough for an overlap to show
			done()
			if err := l.Release(ctx); err != nil {
				releaseErrs.Add(1) // unconfirmed: the key goes at its TTL
			}
		}
		return nil
	})
	close(stop)
	n := <-disrupted
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping holds of a shared lock", n)
	}
	t.Logf("%d disruptions, %d releases unconfirmed, %d replies read by their callers", n, releaseErrs.Load(), mx.OwnReads())
	l, err := c.TryAcquire(ctx, "atk:mix:after")
	if err != nil {
		t.Fatalf("after the disruptions: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// everyGoroutine runs fn(0)...fn(n-1) on n goroutines, waits for them,
// and fails t with each error they return.
func everyGoroutine(t *testing.T, n int, fn func(g int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(g); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// waitIdle waits until mx's connection has no command awaiting a reply.
func waitIdle(t *testing.T, mx redigot.MuxState, bound time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if !redistest.WaitFor(ctx, func() bool {
		return mx.Idle()
	}) {
		t.Fatalf("the connection still awaits a reply after %v", bound)
	}
}
