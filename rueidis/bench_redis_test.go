package rueidis

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// BenchmarkLane_lockUnlock measures what the lane is worth over rueidis's
// own auto-pipelining: lock+unlock cycles through New's transports
// (lane: ordered DoMulti batches) and through transports that send each
// command from a goroutine of its own with Do (direct: not Ordered, so
// the redlock.Client chains a holder's commands), side by side, on 64
// goroutines with N=5 and one goroutine with N=1.
func BenchmarkLane_lockUnlock(b *testing.B) {
	for _, cell := range []struct{ n, par int }{{5, 64}, {1, 1}} {
		servers := redistest.Start(b, cell.n)
		for _, mode := range []string{"lane", "direct"} {
			b.Run(fmt.Sprintf("N=%d/clients=%d/%s", cell.n, cell.par, mode), func(b *testing.B) {
				ts := make([]transport.Transport, cell.n)
				for i, s := range servers {
					t := NewTransport(dialB(b, s.Addr()))
					t.direct = mode == "direct"
					ts[i] = t
				}
				c, err := redlock.NewWithTransports(ts)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				ctx := context.Background()
				var id atomic.Int64
				b.SetParallelism(max(1, cell.par/max(1, testingProcs())))
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					key := "bench-" + strconv.FormatInt(id.Add(1), 10)
					for pb.Next() {
						l, err := c.Acquire(ctx, key, redlock.WithTTL(10*time.Second))
						if err != nil {
							b.Error(err)
							return
						}
						if err := l.Release(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
