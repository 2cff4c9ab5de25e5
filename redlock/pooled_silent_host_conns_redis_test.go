package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// A lone master (N=1), or every master, stopped (SIGSTOP) while 32
// goroutines keep trying for 3 s: no master is ever silent beyond the
// host (it is the host), so every acquisition is sent and holds a pooled
// connection for its wait and one timeout's grace, where before it failed
// unsent once the master was known down. The connections in use on a
// stopped master must stay within what the pile-up test allows for one
// stopped master among healthy ones (about 400,
// TestPooled_connectionsBoundedOnAStoppedMaster).
func TestPooled_everyMasterStoppedConnectionsStayBounded(t *testing.T) {
	redistest.SkipShort(t)
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			servers := redistest.Start(t, n)
			const timeout = 100 * time.Millisecond
			const goroutines = 32
			ps := make([]pool.Pool, n)
			inUse := make([]func() int, n)
			for i, s := range servers {
				p := redistest.UserRedisPool(s.Addr(), nil)
				t.Cleanup(func() { p.Close() })
				ps[i] = p
				inUse[i] = func() int { st := p.Stats(); return st.ActiveCount - st.IdleCount }
			}
			c := pooledOf(t, ps, redlock.WithTimeout(timeout))
			warm(t, c, "silenthost:conns:warm")
			pauseAll(t, servers)
			ctx := context.Background()
			var peak atomic.Int64
			var tries, unsent atomic.Int64
			done := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-done:
						return
					case <-tick.C:
						for _, f := range inUse {
							if u := int64(f()); u > peak.Load() {
								peak.Store(u)
							}
						}
					}
				}
			}()
			end := time.Now().Add(3 * time.Second)
			var callers sync.WaitGroup
			for g := range goroutines {
				callers.Add(1)
				go func() {
					defer callers.Done()
					for i := 0; time.Now().Before(end); i++ {
						tries.Add(1)
						_, err := c.TryAcquire(ctx, fmt.Sprintf("silenthost:conns:%d:%d", g, i))
						if err != nil && strings.Contains(err.Error(), "not tried") {
							unsent.Add(1)
						}
					}
				}()
			}
			callers.Wait()
			atEnd := 0
			for _, f := range inUse {
				atEnd = max(atEnd, f())
			}
			t.Logf("in use on one master as the callers stopped: %d", atEnd)
			close(done)
			wg.Wait()
			t.Logf("N=%d, %d goroutines for 3 s, every master stopped: %d tries, %d failed unsent; peak pooled connections in use on one master %d", n, goroutines, tries.Load(), unsent.Load(), peak.Load())
			if p := peak.Load(); p > 400 {
				t.Errorf("peak %d pooled connections in use on a stopped master, want at most about 400", p)
			}
		})
	}
}
