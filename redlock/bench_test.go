package redlock_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// BenchmarkAcquireRelease measures one lock+unlock cycle on real masters:
// the hot path's latency, allocations and bytes.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, mode := range []string{"pooled", "pipelined"} {
		for _, n := range []int{1, 3, 5} {
			b.Run(fmt.Sprintf("%s/N=%d", mode, n), func(b *testing.B) { benchAcquireRelease(b, n, mode == "pipelined") })
		}
	}
}

func benchAcquireRelease(b *testing.B, n int, pipelined bool) {
	{
		{
			servers := redistest.Start(b, n)
			pools := make([]pool.Pool, n)
			for i, s := range servers {
				pools[i] = s.Pool()
			}
			c, err := redlock.New(pools, redlock.WithPipelining(pipelined))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l, err := c.TryAcquire(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}
