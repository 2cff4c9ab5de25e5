package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// BenchmarkHandOver_contention is the contention cell of the peers'
// bench (bench/contention.go: 8 clients, each its own Client, loop
// Acquire with an 8 s TTL, hold, Release on one key, N=5) for a Client
// with the hand-over line and one without, side by side. An op is one
// cycle of one client; it reports cycles/s, the p99 of a whole cycle and
// how many attempts a lock took on average.
func BenchmarkHandOver_contention(b *testing.B) {
	servers := redistest.Start(b, 5)
	for _, hold := range []time.Duration{0, time.Millisecond} {
		for _, line := range []bool{false, true} {
			b.Run(fmt.Sprintf("hold=%v/line=%v", hold, line), func(b *testing.B) {
				clients := make([]*Client, 8)
				for i := range clients {
					clients[i] = leadClient(b, servers, true)
					clients[i].handOver = line
				}
				key := fmt.Sprintf("bench:handover:%v:%v:%d", hold, line, b.N)
				var left atomic.Int64
				left.Store(int64(b.N))
				var mu sync.Mutex
				var cycles []time.Duration
				var attempts, locks atomic.Int64
				ctx := context.Background()
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for _, c := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var mine []time.Duration
						for left.Add(-1) >= 0 {
							t0 := time.Now()
							l, err := c.Acquire(ctx, key, WithTTL(8*time.Second))
							if err != nil {
								b.Error(err)
								return
							}
							attempts.Add(int64(l.Attempts()))
							locks.Add(1)
							if hold > 0 {
								time.Sleep(hold) // the subject: the cell's hold
							}
							if err := l.Release(ctx); err != nil {
								b.Error(err)
								return
							}
							mine = append(mine, time.Since(t0))
						}
						mu.Lock()
						cycles = append(cycles, mine...)
						mu.Unlock()
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				if len(cycles) == 0 {
					return
				}
				slices.Sort(cycles)
				b.ReportMetric(float64(len(cycles))/elapsed.Seconds(), "cycles/s")
				b.ReportMetric(float64(cycles[len(cycles)*99/100])/1e6, "p99-cycle-ms")
				b.ReportMetric(float64(attempts.Load())/float64(locks.Load()), "attempts/lock")
			})
		}
	}
}
