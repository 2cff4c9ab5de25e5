package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// starvedConn is a real connection whose commands on one key are read as
// by a goroutine that did not run for a while after writing them (a busy
// process): the master answers at once, the reply waits in the socket,
// and the read begins `late` after the write.
type starvedConn struct {
	redis.Conn
	key  string
	late time.Duration
}

func (c starvedConn) DoWithTimeout(timeout time.Duration, cmd string, args ...any) (any, error) {
	if !slices.Contains(args, any(c.key)) {
		return redis.DoWithTimeout(c.Conn, timeout, cmd, args...)
	}
	start := time.Now()
	if err := c.Send(cmd, args...); err != nil {
		return nil, err
	}
	if err := c.Flush(); err != nil {
		return nil, err
	}
	time.Sleep(c.late) // the subject: a reply read this late
	// What is left of the caller's bound: a read whose deadline has
	// passed fails at once, reply or not (as Go's poller does).
	left := timeout - time.Since(start)
	if left <= 0 {
		left = time.Nanosecond
	}
	return redis.ReceiveWithTimeout(c.Conn, left)
}

func (c starvedConn) ReceiveWithTimeout(timeout time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, timeout)
}

// starvedPool lends starvedConns from a redigo pool; it cannot dial
// connections of its own, so the client takes the pooled path.
type starvedPool struct {
	p    *redis.Pool
	key  string
	late time.Duration
}

func (s starvedPool) GetContext(ctx context.Context) (redis.Conn, error) {
	c, err := s.p.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return starvedConn{Conn: c, key: s.key, late: s.late}, nil
}

// TestPooledLoad_replyReadLateOnABusyProcessCounts: on the pooled path,
// a master that answered in time — and keeps answering this process's
// other commands — is not failed because the goroutine that reads one
// reply ran after the round's deadline (a busy process). Before, the read
// was bounded by the deadline itself and failed with an i/o timeout while
// the reply sat in the socket: under a busy loop per core, 64 goroutines
// failed acquisitions and left releases unconfirmed with every master up.
// A master that is silent still fails at the timeout
// (TestPooledLoad_silentMasterStillFailsAtTheTimeout).
func TestPooledLoad_replyReadLateOnABusyProcessCounts(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	const timeout = 500 * time.Millisecond
	rp := &redis.Pool{MaxIdle: 8, DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", s.Addr())
	}}
	defer rp.Close()
	// Read 100 ms after the deadline; the client reads a reply up to one
	// timeout past it while the master is heard.
	p := starvedPool{p: rp, key: "pooledload:late", late: timeout + 100*time.Millisecond}
	c, err := redigo.New([]pool.Pool{p}, redlock.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	// The process's other commands keep the master heard.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			l, err := c.TryAcquire(ctx, fmt.Sprintf("pooledload:other:%d", i%4))
			if err == nil {
				_ = l.Release(ctx)
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	l, err := c.TryAcquire(ctx, "pooledload:late", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("a reply read late by this process failed the acquisition: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}
}

// TestPooledLoad_silentMasterStillFailsAtTheTimeout: a master that
// answers nothing (SIGSTOP) is silent from the first command, so the
// pooled path fails it at the per-master timeout as before, not a grace
// later; TryAcquire returns, and leaves nothing once the master resumes.
func TestPooledLoad_silentMasterStillFailsAtTheTimeout(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 3)
	pools := make([]pool.Pool, len(servers))
	for i, s := range servers {
		pools[i] = s.Pool()
	}
	c, err := redigo.New(pools, redlock.WithTimeout(realTimeout), redigo.WithPipelining(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	warm, err := c.TryAcquire(ctx, "pooledload:warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers[1:] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			for _, s := range servers[1:] {
				_ = s.Resume()
			}
		}
	}
	defer resume()
	_, err = c.TryAcquire(ctx, "pooledload:silent", redlock.WithTTL(time.Minute))
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || qe.Failed == nil || len(qe.Failed.Errors) != 2 {
		t.Fatalf("two of three masters stopped: got %v, want a QuorumError with both failed", err)
	}
	resume()
	leftover.None(t, servers, "pooledload:silent")
}
