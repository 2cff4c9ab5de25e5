package redlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// exclusion checks that no two holders of one key hold it validly at
// once: a holder enters with its lock's Until, and finding another one
// inside whose Until has not passed is a violation.
type exclusion struct {
	mu         sync.Mutex
	inside     int
	until      time.Time // the latest Until of those inside
	violations int
	holds      int
	lastFence  uint64
}

func (e *exclusion) enter(t *testing.T, who string, l *redlock.Lock, fenced bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	if !now.Before(l.Until()) {
		return false // granted too late to use: not a hold
	}
	if e.inside > 0 && now.Before(e.until) {
		e.violations++
		t.Errorf("%s holds %q (until %v) while another holder's lock is valid until %v",
			who, l.Key(), l.Until().Format("15:04:05.000"), e.until.Format("15:04:05.000"))
	}
	if fenced {
		if f := l.Fence(); f <= e.lastFence {
			t.Errorf("%s: fence %d after %d", who, f, e.lastFence)
		} else {
			e.lastFence = f
		}
	}
	e.inside++
	e.holds++
	if l.Until().After(e.until) {
		e.until = l.Until()
	}
	return true
}

func (e *exclusion) leave() {
	e.mu.Lock()
	e.inside--
	if e.inside == 0 {
		e.until = time.Time{}
	}
	e.mu.Unlock()
}

// Clients on both redigo paths take the same key, in every exclusive
// kind, while one master at a time is frozen (SIGSTOP) for shorter and
// longer than the per-master timeout: the holders never overlap while
// their locks are valid, fencing tokens only grow, and the clients close
// within a bound with nothing left running.
func TestExclusion_mixedPathsUnderFrozenMasters(t *testing.T) {
	redistest.SkipShort(t)
	kinds := []struct {
		name    string
		fenced  bool
		acquire func(ctx context.Context, c *redlock.Client) (*redlock.Lock, error)
	}{
		{"plain", false, func(ctx context.Context, c *redlock.Client) (*redlock.Lock, error) {
			return c.Acquire(ctx, "k", redlock.WithTTL(400*time.Millisecond), redlock.WithWait(time.Second))
		}},
		{"fair", false, func(ctx context.Context, c *redlock.Client) (*redlock.Lock, error) {
			return c.Acquire(ctx, "k", redlock.WithTTL(400*time.Millisecond), redlock.WithWait(time.Second), redlock.WithFair())
		}},
		{"write", false, func(ctx context.Context, c *redlock.Client) (*redlock.Lock, error) {
			return c.AcquireWrite(ctx, "k", redlock.WithTTL(400*time.Millisecond), redlock.WithWait(time.Second))
		}},
		{"fenced", true, func(ctx context.Context, c *redlock.Client) (*redlock.Lock, error) {
			return c.Acquire(ctx, "k", redlock.WithTTL(400*time.Millisecond), redlock.WithWait(time.Second), redlock.WithFencing())
		}},
	}
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			rs := startReal(t, 3)
			stop := pauser(t, rs, []time.Duration{30 * time.Millisecond, 250 * time.Millisecond, 80 * time.Millisecond}, 100*time.Millisecond)
			defer stop()
			var ex exclusion
			var failed atomic.Int64
			clients := []*redlock.Client{
				rs.client(t, pipelinedPath, redlock.WithTimeout(60*time.Millisecond)),
				rs.client(t, pooledPath, redlock.WithTimeout(60*time.Millisecond)),
			}
			end := time.Now().Add(3 * time.Second)
			var wg sync.WaitGroup
			for ci, c := range clients {
				for g := 0; g < 3; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						who := []string{"pipelined", "pooled"}[ci]
						for time.Now().Before(end) {
							ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
							l, err := kind.acquire(ctx, c)
							if err != nil {
								failed.Add(1)
								cancel()
								continue
							}
							if ex.enter(t, who, l, kind.fenced) {
								time.Sleep(2 * time.Millisecond) // the subject: a hold long enough for an overlap to show
								ex.leave()
							}
							_ = l.Release(ctx)
							cancel()
						}
					}()
				}
			}
			wg.Wait()
			stop()
			t.Logf("%d holds, %d attempts failed", ex.holds, failed.Load())
			if ex.holds < 10 {
				t.Errorf("only %d holds in 3 s", ex.holds)
			}
			for _, c := range clients {
				closeWithin(t, c, 3*time.Second)
			}
		})
	}
}
