package goredis_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/goredis"
	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/redlock"
)

// BenchmarkClusterMembers_acquireRelease: lock throughput (Acquire then
// Release of distinct keys, 64 goroutines) on 3 members, each a Redis
// Cluster of S primaries (redis-server processes), as S grows from 1 to 3.
// Every node, the client and the benchmark share the machine's cores, so
// the figure grows with S only where the cores are not already busy.
func BenchmarkClusterMembers_acquireRelease(b *testing.B) {
	for _, s := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("S=%d", s), func(b *testing.B) {
			members := cluster.StartRedisClusters(b, 3, s, cluster.WithBackend(cluster.Process))
			clients := make([]redis.UniversalClient, len(members))
			for i, m := range members {
				cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: m.Seeds(), ReadTimeout: time.Second})
				b.Cleanup(func() { cc.Close() })
				clients[i] = cc
			}
			c, err := goredis.New(clients, redlock.WithTimeout(time.Second))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			var id atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				n := id.Add(1)
				for i := 0; pb.Next(); i++ {
					key := "bench:" + strconv.FormatInt(n, 10) + ":" + strconv.Itoa(i%64)
					l, err := c.Acquire(ctx, key, redlock.WithWait(0))
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
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "locks/s")
		})
	}
}
