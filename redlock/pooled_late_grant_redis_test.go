package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// The pooled transport's reads past the round's deadline: a reply is read up to one per-master timeout late, and the
// transport tells collect whether its master is silent.

const lateReplyTimeout = 300 * time.Millisecond

// starvedClient is a pooled client of one master whose replies on key are
// read `late` after they were written (starvedPool), and the pool under it.
func starvedClient(t *testing.T, s *redistest.Server, key string, late time.Duration) *redlock.Client {
	t.Helper()
	rp := &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", s.Addr())
	}}
	t.Cleanup(func() { rp.Close() })
	c, err := redigo.New([]pool.Pool{starvedPool{p: rp, key: key, late: late}}, redlock.WithTimeout(lateReplyTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// keepHeard keeps the master answering the client's other commands until
// the returned stop is called.
func keepHeard(c *redlock.Client, prefix string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := context.Background()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			l, err := c.TryAcquire(ctx, fmt.Sprintf("%s:%d", prefix, i%4))
			if err == nil {
				_ = l.Release(ctx)
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// TestLateGrant_doesNotExtendValidity: a grant read 100 ms past
// the round's deadline counts, but the lock's validity runs from before
// the round began: Until is no later than start + TTL − drift, and what is
// left when TryAcquire returns is less than the TTL by at least the time
// the round took.
func TestLateGrant_doesNotExtendValidity(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	const key = "lr:pooled:validity"
	rp := &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", s.Addr())
	}}
	defer rp.Close()
	sent := make(chan time.Time, 1)
	sp := sentPool{starvedPool{p: rp, key: key, late: lateReplyTimeout + 100*time.Millisecond}, key, sent}
	c, err := redigo.New([]pool.Pool{sp}, redlock.WithTimeout(lateReplyTimeout))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := keepHeard(c, "lr:pooled:validity:other")
	defer stop()
	ctx := context.Background()
	const ttl = 2 * time.Second
	before := time.Now()
	l, err := c.TryAcquire(ctx, key, redlock.WithTTL(ttl))
	after := time.Now()
	_ = before
	if err != nil {
		t.Fatalf("a grant read late by a busy process: %v", err)
	}
	defer l.Release(ctx)
	if took := after.Sub(before); took < lateReplyTimeout {
		t.Fatalf("TryAcquire took %v: the reply was not read late", took)
	}
	// The SET was written at `at`: the key lives on the master until at
	// least at+TTL, and the validity must end a drift before that.
	at := <-sent
	drift := time.Duration(float64(ttl)*redlock.DefaultDriftFactor) + 2*time.Millisecond
	if u := l.Until(); u.After(at.Add(ttl - drift)) {
		t.Errorf("Until %v after the SET's write + TTL − drift (%v past it): a late grant lengthened the validity",
			u.Sub(at), u.Sub(at.Add(ttl-drift)))
	}
	// The master's key expires no earlier than the lock's validity.
	pttl, err := redis.Int64(s.Do("PTTL", key))
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(l.Until()); time.Duration(pttl)*time.Millisecond < left {
		t.Errorf("the master's key expires in %d ms, before the lock's validity ends (%v)", pttl, left)
	}
}

// TestLateGrant_afterTheRoundFailedIsRolledBack: with nothing
// else heard from the master, a reply not read by the timeout fails the
// round at the timeout (the master is silent as far as this process can
// tell). The grant read later, within the grace, must still be rolled
// back: the key must not stay until its TTL.
func TestLateGrant_afterTheRoundFailedIsRolledBack(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	const key = "lr:pooled:failedlate"
	c := starvedClient(t, s, key, lateReplyTimeout+100*time.Millisecond)
	ctx := context.Background()
	before := time.Now()
	_, err := c.TryAcquire(ctx, key, redlock.WithTTL(time.Minute))
	took := time.Since(before)
	t.Logf("TryAcquire after %v: %v", took, err)
	if err == nil {
		// Granted after an overdue wait: the lock must then be sound.
		t.Logf("granted late")
	} else if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire: %v", err)
	}
	if took > 2*lateReplyTimeout+150*time.Millisecond {
		t.Errorf("TryAcquire took %v, past two per-master timeouts", took)
	}
	if err == nil {
		return
	}
	if !s.WaitAbsent(key, 5*time.Second) {
		v, _ := redis.String(s.Do("GET", key))
		t.Fatalf("the late grant (%q) was not rolled back", v)
	}
}

// TestLateGrant_afterCtxEndsIsRolledBack: the caller's ctx ends
// while the grant waits to be read (the master heard all along); the call
// returns at ctx, and the grant read after that is rolled back.
func TestLateGrant_afterCtxEndsIsRolledBack(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	const key = "lr:pooled:ctxlate"
	c := starvedClient(t, s, key, lateReplyTimeout+100*time.Millisecond)
	stop := keepHeard(c, "lr:pooled:ctxlate:other")
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Millisecond)
	defer cancel()
	before := time.Now()
	_, err := c.TryAcquire(ctx, key, redlock.WithTTL(time.Minute))
	took := time.Since(before)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire: %v, want ctx's deadline", err)
	}
	if took > 80*time.Millisecond+50*time.Millisecond {
		t.Errorf("TryAcquire returned %v after it began, ctx ended at 80ms", took)
	}
	// The grant lands on the master and is read about 400 ms in.
	if !s.WaitAbsent(key, 5*time.Second) {
		v, _ := redis.String(s.Do("GET", key))
		t.Fatalf("the grant read after ctx ended (%q) was not rolled back", v)
	}
}

// TestLateGrant_closeWithALateReplyInFlight: Close while a failed
// attempt's grant is still on its way. The master ran the SET at once and
// its reply comes 500 ms in: past the round's deadline (300 ms), within
// the pooled transport's grace (600 ms), and past the one timeout Close
// gives the work in flight (Close begins at 100 ms, when the caller's ctx
// ends). The grant is then read by a transport already closed, and its
// rollback is refused: the key stays until its TTL (a read that failed at
// the deadline would fall inside Close's window, and the rollback sent then
// would delete the key). Close must return within its bounds, leak
// no goroutine, and leave no key behind.
func TestLateGrant_closeWithALateReplyInFlight(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	// Checked after the proxy stops (cleanups run last first).
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	const key = "lr:pooled:close"
	var once sync.Once
	hook := func(c *hostile.Conn, cmd []string) hostile.Verdict {
		if cmd[0] != "SET" || len(cmd) < 2 || cmd[1] != key {
			return hostile.Forward
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return hostile.Forward
		}
		v, err := s.Run(cmd) // it runs now
		if err != nil {
			return hostile.HangUp
		}
		select {
		case <-time.After(500 * time.Millisecond): // its reply is slow
		case <-c.Quit():
		}
		_ = c.Write(hostile.EncodeReply(v))
		return hostile.Drop // run once: the rollback sent on that reply finds it
	}
	p := hostile.NewProxy(t, s.Addr(), hook)
	c, err := redigo.NewFromAddrs([]string{p.Addr()}, redlock.WithTimeout(lateReplyTimeout), redigo.WithPipelining(false))
	if err != nil {
		t.Fatal(err)
	}
	warm, err := c.TryAcquire(context.Background(), "lr:pooled:close:warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.TryAcquire(ctx, key, redlock.WithTTL(time.Minute)); err == nil {
		t.Fatal("granted within 100 ms with the reply 500 ms late")
	}
	before := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(before)
	t.Logf("Close took %v", took)
	if took > 3*lateReplyTimeout {
		t.Errorf("Close took %v, over three per-master timeouts", took)
	}
	if !s.WaitAbsent(key, 2*time.Second) {
		pttl, _ := redis.Int64(s.Do("PTTL", key))
		t.Errorf("the failed attempt's grant, read while Close ran, was left on the master (PTTL %d ms): its rollback was refused by the closed transport", pttl)
	}
}

// TestPooled_oneConnectionBlackholedWhileTheMasterIsHeard: a master
// that keeps answering this process's other commands but never answers
// the lock's (a proxy holds that one command) is not silent, so collect
// waits on past the timeout; it must still give up one timeout after the
// timer fired (bounded), fail the attempt, and leave nothing.
func TestPooled_oneConnectionBlackholedWhileTheMasterIsHeard(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	const key = "lr:pooled:blackhole"
	release := make(chan struct{})
	var once sync.Once
	hook := func(c *hostile.Conn, cmd []string) hostile.Verdict {
		if cmd[0] == "SET" && len(cmd) > 1 && cmd[1] == key {
			held := false
			once.Do(func() { held = true })
			if held {
				select {
				case <-release:
				case <-c.Quit():
				}
				return hostile.HangUp // never run
			}
		}
		return hostile.Forward
	}
	p := hostile.NewProxy(t, s.Addr(), hook)
	c, err := redigo.NewFromAddrs([]string{p.Addr()}, redlock.WithTimeout(lateReplyTimeout), redigo.WithPipelining(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer close(release)
	stop := keepHeard(c, "lr:pooled:blackhole:other")
	defer stop()
	ctx := context.Background()
	before := time.Now()
	_, err = c.TryAcquire(ctx, key, redlock.WithTTL(time.Minute))
	took := time.Since(before)
	t.Logf("TryAcquire after %v: %v", took, err)
	if err == nil {
		t.Fatal("granted by a master that never ran the SET")
	}
	if took > 2*lateReplyTimeout+150*time.Millisecond {
		t.Errorf("TryAcquire took %v, past two per-master timeouts", took)
	}
	leftover.None(t, []*redistest.Server{s}, key)
}

// sentPool records when the command on key was written (just before it).
type sentPool struct {
	starvedPool
	key  string
	sent chan time.Time
}

func (p sentPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := p.starvedPool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return sentConn{c.(starvedConn), p.key, p.sent}, nil
}

type sentConn struct {
	starvedConn
	key  string
	sent chan time.Time
}

func (c sentConn) DoWithTimeout(timeout time.Duration, cmd string, args ...any) (any, error) {
	if len(args) > 0 && args[0] == any(c.key) {
		select {
		case c.sent <- time.Now():
		default:
		}
	}
	return c.starvedConn.DoWithTimeout(timeout, cmd, args...)
}
