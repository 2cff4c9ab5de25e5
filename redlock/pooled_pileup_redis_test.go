package redlock_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestAttack25c_pooledPileUpOnAStoppedMaster: one master of three stopped
// (SIGSTOP) while 32 goroutines lock and unlock keys of their own for
// 2 s on the pooled path (timeout 50 ms), without load and with four busy
// goroutines per P. A command to the stopped master holds its connection
// up to lateBound (1 s) past its deadline while the master is not yet
// silent, one timeout once it is: the connections open to it must stay
// bounded, and Close must wait no longer than lateBound. The numbers are
// logged. Measured over 3 s (attack25c): without load 413-436
// connections at most (9692045^: 304-308), Close 58-96 ms (95 ms); under
// load 181-422 (92-160), about 0.3 per cycle (0.12), and Close 758-880 ms
// (0-41 ms): beat.behind makes the stopped master not silent, so its
// commands get lateBound — see TestAttack25c_pooledSilenceOfAHungMasterIsNotExcusedByAFewMsBehind.
func TestAttack25c_pooledPileUpOnAStoppedMaster(t *testing.T) {
	redistest.SkipShort(t)
	for _, load := range []attack25cLoad{loadNone, loadGoroutines4} {
		t.Run(string(load), func(t *testing.T) {
			servers := redistest.Start(t, 3)
			pools := make([]pool.Pool, len(servers))
			rps := make([]*pool.RedisPool, len(servers))
			for i, s := range servers {
				rps[i] = s.Pool()
				pools[i] = rps[i]
			}
			const timeout = 50 * time.Millisecond
			c, err := redigo.New(pools, redlock.WithTimeout(timeout), redigo.WithPipelining(false))
			if err != nil {
				t.Fatal(err)
			}
			closed := false
			defer func() {
				if !closed {
					c.Close()
				}
			}()
			ctx := context.Background()
			warm, err := c.TryAcquire(ctx, "a25c:pile:warm")
			if err != nil {
				t.Fatal(err)
			}
			_ = warm.Release(ctx)
			if err := servers[2].Pause(); err != nil {
				t.Fatal(err)
			}
			resumed := false
			resume := func() {
				if !resumed {
					resumed = true
					_ = servers[2].Resume()
				}
			}
			defer resume()
			stopLoad := load.start(t)
			g0 := runtime.NumGoroutine()
			var (
				cycles, failed atomic.Int64
				maxActive      atomic.Int64
				maxGoroutines  atomic.Int64
			)
			end := time.Now().Add(2 * time.Second)
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				for time.Now().Before(end) {
					if a := int64(rps[2].Stats().ActiveCount); a > maxActive.Load() {
						maxActive.Store(a)
					}
					if g := int64(runtime.NumGoroutine()); g > maxGoroutines.Load() {
						maxGoroutines.Store(g)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}()
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; time.Now().Before(end); i++ {
						l, err := c.TryAcquire(ctx, fmt.Sprintf("a25c:pile:%d:%d", g, i), redlock.WithTTL(10*time.Second))
						if err != nil {
							failed.Add(1)
							continue
						}
						_ = l.Release(ctx)
						cycles.Add(1)
					}
				}()
			}
			wg.Wait()
			<-sampled
			stopLoad()
			atEnd := rps[2].Stats().ActiveCount
			begin := time.Now()
			_ = c.Close()
			closed = true
			closeTook := time.Since(begin)
			afterClose := rps[2].Stats().ActiveCount
			resume()
			// Connections the stopped master accepted (while stopped, the
			// kernel completes the handshake) and still has open from us.
			time.Sleep(100 * time.Millisecond)
			list, err := redis.String(servers[2].Do("CLIENT", "LIST"))
			if err != nil {
				t.Fatal(err)
			}
			open := strings.Count(list, "\n") - 1 // less our own
			t.Logf("load %s: %d cycles, %d failed; master 2 (stopped): max %d connections open from its pool (%d at the end, %d after Close); CLIENT LIST after resume: %d; Close took %v; goroutines %d -> max %d",
				load, cycles.Load(), failed.Load(), maxActive.Load(), atEnd, afterClose, open, closeTook.Round(time.Millisecond), g0, maxGoroutines.Load())
			if closeTook > 2*time.Second {
				t.Errorf("Close took %v with one master stopped (lateBound 1 s)", closeTook)
			}
			// Without load of its own, this process keeps up: failures
			// would be the stopped master's pile-up reaching the healthy
			// ones. A shared machine (other test binaries running beside
			// this one) sometimes delays a healthy master's reply past
			// the 50 ms timeout, which no evidence of this process's own
			// stalls excuses: one or two such (of ~3,000 cycles) were
			// seen in full-suite runs on a busy machine; a cascade fails
			// hundreds.
			if f := failed.Load(); load == loadNone && f > max(2, cycles.Load()/500) {
				t.Errorf("%d acquisitions failed with two of three masters up", f)
			}
			if m := maxActive.Load(); m > 1000 {
				t.Errorf("%d connections piled up on the stopped master", m)
			}
		})
	}
}
