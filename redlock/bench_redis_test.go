package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
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
			c, err := redigo.New(pools, redigo.WithPipelining(pipelined))
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

// BenchmarkParallelOwnPools compares, in one run, 64 goroutines (at
// GOMAXPROCS=2; 32 per P) locking keys of their own on N=5 masters through
// NewFromAddrs and through plain *redis.Pool values of the user's own (one
// per master, dialing with its own settings), which pipeline too; and the
// same pools on the pooled path for reference. Compare their ns/op. The
// per-master timeout is the tests' generous one, for all three alike: on a
// loaded machine the default 50 ms fails calls.
func BenchmarkParallelOwnPools(b *testing.B) {
	const n = 5
	servers := redistest.Start(b, n)
	addrs := make([]string, n)
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	ownPools := func(b *testing.B) []pool.Pool {
		pools := make([]pool.Pool, n)
		for i, addr := range addrs {
			p := &redis.Pool{MaxIdle: 128, DialContext: func(ctx context.Context) (redis.Conn, error) {
				return redis.DialContext(ctx, "tcp", addr, redis.DialReadTimeout(time.Second), redis.DialWriteTimeout(time.Second))
			}}
			b.Cleanup(func() { p.Close() })
			pools[i] = p
		}
		return pools
	}
	timeout := redlock.WithTimeout(realTimeout)
	var next atomic.Int64 // keys are never reused across runs
	for _, tc := range []struct {
		name string
		make func(b *testing.B) (*redlock.Client, error)
	}{
		{"NewFromAddrs", func(b *testing.B) (*redlock.Client, error) { return redigo.NewFromAddrs(addrs, timeout) }},
		{"redis.Pool", func(b *testing.B) (*redlock.Client, error) { return redigo.New(ownPools(b), timeout) }},
		{"redis.Pool/pooled", func(b *testing.B) (*redlock.Client, error) {
			return redigo.New(ownPools(b), timeout, redigo.WithPipelining(false))
		}},
	} {
		b.Run(fmt.Sprintf("%s/N=%d", tc.name, n), func(b *testing.B) {
			c, err := tc.make(b)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			// Dial before the clock starts.
			l, err := c.TryAcquire(ctx, "bench:own:warm")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
			var failed atomic.Int64
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := selfCPU()
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("bench:own:%d", next.Add(1))
				for pb.Next() {
					// A master that answers too late (the machine is
					// loaded) fails a cycle, and may leave the key until
					// its TTL: counted, and the goroutine moves on to a
					// new key. Any other failure is fatal.
					l, err := c.TryAcquire(ctx, key)
					if err == nil {
						err = l.Release(ctx)
					}
					var qe *redlock.QuorumError
					if errors.As(err, &qe) {
						failed.Add(1)
						key = fmt.Sprintf("bench:own:%d", next.Add(1))
					} else if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
			b.ReportMetric(float64(selfCPU()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
		})
	}
}

// selfCPU is this process's user+system CPU time, the masters' (other
// processes) left out: on a shared machine a change to the client's own
// work shows in it more steadily than in the wall clock.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHandoff: 8 clients (each its own Client, as 8 processes) on
// one key, N=5, no hold, each looping Acquire + Release; an op is one
// cycle of any client. It reports the p50 wait of an Acquire (wait-ms),
// and how unevenly the clients got the lock (jain: 1 is even). The
// bench's handoff cell is the full measurement; this one is for
// side-by-side runs of a change to waking.
func BenchmarkHandoff(b *testing.B) {
	const clients = 8
	b.ReportAllocs()
	waits := handoffWaits(b, 5, clients, "bench:handoff", 0)
	var all []time.Duration
	var sum, sq float64
	for _, w := range waits {
		all = append(all, w...)
		sum += float64(len(w))
		sq += float64(len(w)) * float64(len(w))
	}
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2])/1e6, "wait-ms")
	}
	if sq > 0 {
		b.ReportMetric(sum*sum/(clients*sq), "jain")
	}
}

// handoffWaits runs b.N cycles of Acquire, hold, Release on key by
// clients Clients (each its own, as separate processes) of n masters, and
// returns each client's waits.
func handoffWaits(b *testing.B, n, clients int, key string, hold time.Duration) [][]time.Duration {
	servers := redistest.Start(b, n)
	addrs := make([]string, n)
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	cs := make([]*redlock.Client, clients)
	for i := range cs {
		c, err := redigo.NewFromAddrs(addrs, redlock.WithTimeout(realTimeout))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	ctx := context.Background()
	var left atomic.Int64
	left.Store(int64(b.N))
	waits := make([][]time.Duration, clients)
	b.ResetTimer()
	done := make(chan struct{})
	for i, c := range cs {
		go func() {
			defer func() { done <- struct{}{} }()
			for left.Add(-1) >= 0 {
				start := time.Now()
				l, err := c.Acquire(ctx, key, redlock.WithWait(time.Minute))
				if err != nil {
					b.Error(err)
					return
				}
				waits[i] = append(waits[i], time.Since(start))
				if hold > 0 {
					time.Sleep(hold) // the subject: the holder's work
				}
				l.Release(ctx) // a release not confirmed leaves the key until its TTL: it shows in the waits
			}
		}()
	}
	for range cs {
		<-done
	}
	b.StopTimer()
	return waits
}
