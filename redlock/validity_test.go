package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/fakeredis"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// roundStallClock is a clock that, once armed, jumps forward at the second
// reading after arming: an Extend (or a reentrant lock's re-enter) reads
// the clock at its start and again after its round, so the client seems
// paused between the masters' replies and its time check.
type roundStallClock struct {
	clock.Clock
	mu    sync.Mutex
	reads int // readings left before the jump; 0: not armed
	jump  time.Duration
	off   time.Duration
}

func (s *roundStallClock) arm(jump time.Duration) {
	s.mu.Lock()
	s.reads, s.jump = 2, jump
	s.mu.Unlock()
}

func (s *roundStallClock) Now() time.Time {
	s.mu.Lock()
	if s.reads > 0 {
		s.reads--
		if s.reads == 0 {
			s.off += s.jump
		}
	}
	off := s.off
	s.mu.Unlock()
	return s.Clock.Now().Add(off)
}

func (s *roundStallClock) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

func TestLock_Extend_quorumTooLateForShorterTTLIsLost(t *testing.T) {
	fake := clock.NewFake(time.Unix(0, 0))
	clk := &roundStallClock{Clock: fake}
	c, _ := stalledClient(t, clk, fake)
	defer c.Close()
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "k", redlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Every master sets the TTL to 500 ms, but the client only looks at
	// the time 600 ms later: the masters may have let the key expire.
	clk.arm(600 * time.Millisecond)
	err = l.Extend(ctx, 500*time.Millisecond)
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrLockLost) || !errors.As(err, &qe) || !qe.NoValidity || qe.Succeeded < 2 {
		t.Fatalf("Extend = %v, want ErrLockLost with NoValidity after a quorum agreed", err)
	}
	select {
	case <-l.Lost():
	default:
		t.Fatalf("Lost not closed; Until is %v away", l.Until().Sub(clk.Now()))
	}
	if l.Until().After(clk.Now()) {
		t.Errorf("Until is %v away after the lock was lost", l.Until().Sub(clk.Now()))
	}
}

func TestLock_Extend_unconfirmedLongerTTLKeepsValidity(t *testing.T) {
	fs := newFakes(t, 3)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	until := l.Until()
	fs.masters[0].SetDown(true)
	fs.masters[1].SetDown(true)
	// A failed extension to a longer TTL cannot make the lock expire
	// sooner on any master: the old validity stands.
	if err := l.Extend(context.Background(), 3*fakeTTL); !errors.Is(err, redlock.ErrNotExtended) {
		t.Fatalf("err = %v, want ErrNotExtended", err)
	}
	if !l.Until().Equal(until) {
		t.Errorf("Until moved by %v", l.Until().Sub(until))
	}
}

func TestLock_Lost_followsASuccessfulExtend(t *testing.T) {
	fs := newFakes(t, 3)
	ctx := context.Background()
	l, err := fs.client.TryAcquire(ctx, "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	lost := l.Lost()
	first := <-fs.backoffs // the watcher sleeps until Until
	if err := l.Extend(ctx, 5*fakeTTL); err != nil {
		t.Fatal(err)
	}
	// The old validity's end passes: the lock is still held, and the
	// watcher sleeps on until the new one.
	fs.clk.Advance(first)
	select {
	case <-lost:
		t.Fatalf("lost after a successful Extend, with Until %v away: %v", l.Until().Sub(fs.clk.Now()), l.Err())
	case d := <-fs.backoffs:
		if want := l.Until().Sub(fs.clk.Now()); d < want {
			t.Fatalf("after Extend the watcher sleeps %v, want at least %v", d, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not follow the extension")
	}
	if err := l.Extend(ctx, 5*fakeTTL); err != nil {
		t.Fatalf("extend after the old validity's end: %v", err)
	}
	<-fs.backoffs
	fs.clk.Advance(l.Until().Sub(fs.clk.Now()))
	select {
	case <-lost:
		if !errors.Is(l.Err(), redlock.ErrLockLost) || !strings.Contains(l.Err().Error(), "validity ran out") {
			t.Errorf("Err = %v", l.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not lost at the new Until")
	}
}

func TestLock_Lost_followsAShorterTTLWithAutoExtend(t *testing.T) {
	fs := newFakes(t, 3)
	ctx := context.Background()
	l, err := fs.client.TryAcquire(ctx, "k", redlock.WithTTL(fakeTTL), redlock.WithAutoExtend(0))
	if err != nil {
		t.Fatal(err)
	}
	if d := <-fs.backoffs; d != fakeTTL/3 {
		t.Fatalf("the watchdog sleeps %v, want a period (%v)", d, fakeTTL/3)
	}
	const short = 200 * time.Millisecond
	if err := l.Extend(ctx, short); err != nil {
		t.Fatal(err)
	}
	left := l.Until().Sub(fs.clk.Now())
	if left >= fakeTTL/3 {
		t.Fatalf("validity left %v, want less than a period", left)
	}
	select {
	case d := <-fs.backoffs:
		if d != left {
			t.Fatalf("after Extend the watchdog sleeps %v, want until the new Until (%v)", d, left)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watchdog did not follow the shorter validity")
	}
	fs.clk.Advance(left)
	select {
	case <-l.Lost():
		if !errors.Is(l.Err(), redlock.ErrLockLost) {
			t.Errorf("Err = %v", l.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not lost at the new, earlier Until")
	}
}

func TestLock_Release_concurrentCallsDoNotPanic(t *testing.T) {
	// A client without the backoff reports: every iteration starts a timer.
	// The fake masters answer at once, but on a loaded machine a goroutine
	// may wait past the usual 100 ms for the CPU: a long per-master timeout
	// (real time for the pooled workers; the fake clock never fires it)
	// keeps this test about Release, not about scheduling.
	fake := clock.NewFake(time.Unix(0, 0))
	pools := make([]pool.Pool, 3)
	for i := range pools {
		pools[i] = fakeredis.New(fake, fmt.Sprintf("m%d:1", i))
	}
	c, err := redigo.New(pools, redlock.WithClock(fake), redlock.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	deadline := time.Now().Add(3 * time.Second)
	n := 0
	for ; n < 20000 && time.Now().Before(deadline); n++ {
		l, err := c.TryAcquire(ctx, "k", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Lost() // a running monitor, which both calls stop
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = l.Release(ctx)
			}()
		}
		close(start)
		wg.Wait()
		ok, notHeld := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, redlock.ErrNotHeld):
				notHeld++
			}
		}
		if ok != 1 || notHeld != 1 {
			t.Fatalf("iteration %d: Release, Release = %v, %v; want one nil and one ErrNotHeld", n, errs[0], errs[1])
		}
		if !errors.Is(l.Err(), redlock.ErrReleased) {
			t.Fatalf("iteration %d: Err = %v, want ErrReleased", n, l.Err())
		}
	}
	t.Logf("%d iterations", n)
}
