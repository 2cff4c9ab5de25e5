package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// The pipelined writer's yield before a pass that is not full, with the
// re-send on a connection the master closed: N=3, so every command goes through the writer (a lone
// master's caller may read its own reply instead), 32 goroutines of
// mixed kinds — plain, fair, read-write, reentrant — on shared keys,
// plain attempts on keys of their own whose ctx ends a moment after they
// are sent (between enqueue and flush), and every master's connections
// killed every 20 ms. Each shared lock stays exclusive; every key goes.
func TestMux_yieldMixedKindsUnderKillsAndCancels(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	c := addrClient(t, pipelinedPath, addrs)
	ctx := context.Background()

	stop := make(chan struct{})
	killed := make(chan int)
	go func() {
		n := 0
		defer func() { killed <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, s := range servers {
				_, _ = s.Do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
			}
			n++
		}
	}()

	var plainHeld, fairHeld, writers, readers, reHeld atomic.Int32
	var overlaps, unconfirmed, cancelled atomic.Int32
	wait := []redlock.LockOption{redlock.WithWait(20 * time.Second), redlock.WithBackoff(2*time.Millisecond, 10*time.Millisecond), redlock.WithTTL(10 * time.Second)}
	check := func(n int32) {
		if n > 1 {
			overlaps.Add(1)
		}
	}
	var mu sync.Mutex
	var ownKeys []string
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 25))
			var re *redlock.Reentrant
			if g%6 == 5 {
				var err error
				re, err = c.NewReentrant("lr:yield:re", fmt.Sprintf("owner-%d", g), wait...)
				if err != nil {
					errs <- err
					return
				}
			}
			for i := range 15 {
				var l *redlock.Lock
				var err error
				var done func()
				switch g % 6 {
				case 0:
					l, err = c.Acquire(ctx, "lr:yield:plain", wait...)
					if err == nil {
						check(plainHeld.Add(1))
						done = func() { plainHeld.Add(-1) }
					}
				case 1:
					l, err = c.Acquire(ctx, "lr:yield:fair", append(wait, redlock.WithFair())...)
					if err == nil {
						check(fairHeld.Add(1))
						done = func() { fairHeld.Add(-1) }
					}
				case 2:
					l, err = c.AcquireWrite(ctx, "lr:yield:rw", wait...)
					if err == nil {
						check(writers.Add(1))
						if readers.Load() > 0 {
							overlaps.Add(1)
						}
						done = func() { writers.Add(-1) }
					}
				case 3:
					l, err = c.AcquireRead(ctx, "lr:yield:rw", wait...)
					if err == nil {
						readers.Add(1)
						if writers.Load() > 0 {
							overlaps.Add(1)
						}
						done = func() { readers.Add(-1) }
					}
				case 4:
					// An attempt whose ctx ends while its commands are
					// queued or being written.
					key := fmt.Sprintf("lr:yield:own:%d:%d", g, i)
					mu.Lock()
					ownKeys = append(ownKeys, key)
					mu.Unlock()
					cctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(400))*time.Microsecond)
					l, err = c.TryAcquire(cctx, key, redlock.WithTTL(time.Minute))
					cancel()
					if err != nil {
						cancelled.Add(1)
						continue
					}
					done = func() {}
				case 5:
					if err = re.Acquire(ctx); err == nil {
						check(reHeld.Add(1))
						// Taken again, then released once: still held.
						if err2 := re.Acquire(ctx); err2 != nil {
							unconfirmed.Add(1)
						} else if err2 := re.Release(ctx); err2 != nil {
							unconfirmed.Add(1)
						}
						time.Sleep(100 * time.Microsecond) // the subject: a hold long enough for an overlap to show
						reHeld.Add(-1)
						if err := re.Release(ctx); err != nil {
							unconfirmed.Add(1)
						}
						// A give-back that failed left a hold counted: give
						// it back too, so the next cycle starts with none
						// (else its Acquire is one round, with no wait).
						// After a kill round a quorum can stay known down
						// for a redial delay: retry until the count is
						// zero, within a bound.
						giveUpAt := time.Now().Add(10 * time.Second)
						for re.Count() > 0 {
							if time.Now().After(giveUpAt) {
								errs <- fmt.Errorf("reentrant %d, cycle %d: %d holds still counted after 10 s of releases", g, i, re.Count())
								return
							}
							if err := re.Release(ctx); err == nil {
								continue
							}
							unconfirmed.Add(1)
							time.Sleep(5 * time.Millisecond) // between tries while masters are known down
						}
					}
					if err != nil {
						errs <- fmt.Errorf("reentrant %d, cycle %d: %w", g, i, err)
						return
					}
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("goroutine %d (kind %d), cycle %d: %w", g, g%6, i, err)
					return
				}
				time.Sleep(100 * time.Microsecond) // the subject: a hold long enough for an overlap to show
				done()
				if err := l.Release(ctx); err != nil {
					unconfirmed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	n := <-killed
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping holds of a shared lock", n)
	}
	t.Logf("%d kill rounds, %d own attempts failed, %d releases unconfirmed", n, cancelled.Load(), unconfirmed.Load())
	// Every failed attempt is rolled back, every unconfirmed release
	// retried: nothing stays (the own keys' TTL is a minute, the shared
	// ones' 10 s).
	leftover.None(t, servers)
}

// TestMux_yieldCloseDuringBurst: Close while 48 goroutines keep the
// writers' passes partly full on three masters. Every call returns, none
// panics, nobody else's lock is taken over, and Close is bounded.
func TestMux_yieldCloseDuringBurst(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	for rep := range 4 {
		c, err := redigo.NewFromAddrs(addrs, redlock.WithTimeout(realTimeout), redigo.WithPipelining(true))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var held [4]atomic.Int32
		var overlaps atomic.Int32
		var wg sync.WaitGroup
		for g := range 48 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					k := g % 4
					l, err := c.TryAcquire(ctx, fmt.Sprintf("lr:burst:%d", k), redlock.WithTTL(time.Second))
					if errors.Is(err, redlock.ErrClosed) {
						return
					}
					if err != nil {
						continue
					}
					if held[k].Add(1) > 1 {
						overlaps.Add(1)
					}
					held[k].Add(-1)
					if err := l.Release(ctx); errors.Is(err, redlock.ErrClosed) {
						return
					}
				}
			}()
		}
		time.Sleep(time.Duration(20+30*rep) * time.Millisecond) // the subject: Close lands at a different moment each rep
		start := time.Now()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("calls still running 5 s after Close returned")
		}
		if took > 3*realTimeout {
			t.Errorf("rep %d: Close took %v", rep, took)
		}
		if n := overlaps.Load(); n != 0 {
			t.Errorf("rep %d: %d overlapping holds", rep, n)
		}
	}
	leftover.Within(t, time.Second+leftover.Bound, servers) // the TTL of what Close cut short
}
