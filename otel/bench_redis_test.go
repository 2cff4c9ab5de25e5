package otel_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/observe"
	"github.com/quorumlock/quorumlock/otel"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// benchObservers are the configurations compared: no observer, the otel
// observer recording metrics only (a no-op tracer provider), metrics with
// 1% of the spans sampled, and metrics with every span sampled.
var benchObservers = []struct {
	name string
	obs  func(b *testing.B) observe.Observer
}{
	{"none", func(*testing.B) observe.Observer { return nil }},
	{"otel-metrics", func(b *testing.B) observe.Observer {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		o, err := otel.New(otel.WithMeterProvider(mp), otel.WithTracerProvider(noop.NewTracerProvider()))
		if err != nil {
			b.Fatal(err)
		}
		return o
	}},
	{"otel-metrics+traces-1%", func(b *testing.B) observe.Observer { return tracing(b, sdktrace.TraceIDRatioBased(0.01)) }},
	{"otel-metrics+traces", func(b *testing.B) observe.Observer { return tracing(b, sdktrace.AlwaysSample()) }},
}

// tracing is the otel observer with metrics and the spans sampler picks
// (the SDK's batch span processor, exporting to nowhere).
func tracing(b *testing.B, sampler sdktrace.Sampler) observe.Observer {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sampler))
	b.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	o, err := otel.New(otel.WithMeterProvider(mp), otel.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	return o
}

// benchClient is a client of addrs reporting to obs (none when nil), its
// connections dialed.
func benchClient(b *testing.B, addrs []string, obs observe.Observer) *redlock.Client {
	b.Helper()
	opts := []redlock.Option{redlock.WithTimeout(500 * time.Millisecond)}
	if obs != nil {
		opts = append(opts, redlock.WithObserver(obs))
	}
	c, err := redigo.NewFromAddrs(addrs, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	l, err := c.TryAcquire(context.Background(), "bench:obs:warm")
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		b.Fatal(err)
	}
	return c
}

// cycle takes and releases *key once. A master that answers too late (the
// machine is loaded) fails a cycle: counted, and *key moves on to a new
// key. Any other failure is returned.
func cycle(c *redlock.Client, key *string, next, failed *atomic.Int64) error {
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, *key)
	if err == nil {
		err = l.Release(ctx)
	}
	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		failed.Add(1)
		*key = fmt.Sprintf("bench:obs:%d", next.Add(1))
		return nil
	}
	return err
}

// BenchmarkParallelObserver compares, in one run, 64 goroutines (at
// GOMAXPROCS=2; 32 per P) locking keys of their own on N=5 masters with
// each of benchObservers. Compare their ns/op (or cycles/s). On a machine
// whose load varies, BenchmarkObserverRatio is the steadier comparison.
func BenchmarkParallelObserver(b *testing.B) {
	const n = 5
	addrs := startAddrs(b, n)
	var next atomic.Int64 // keys are never reused across runs
	for _, tc := range benchObservers {
		b.Run(fmt.Sprintf("%s/N=%d", tc.name, n), func(b *testing.B) {
			c := benchClient(b, addrs, tc.obs(b))
			var failed atomic.Int64
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			start := time.Now()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("bench:obs:%d", next.Add(1))
				for pb.Next() {
					if err := cycle(c, &key, &next, &failed); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "cycles/s")
			b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
		})
	}
}

// BenchmarkObserverRatio runs the configurations of benchObservers in
// turns of 1,000 cycles each (64 goroutines, N=5), the order of the turns
// rotating, 8 turns each per b.N, so that a change of the machine's load
// weighs on all of them alike. It reports each one's cycles/s and its
// ratio to "none". Run it with -benchtime 1x (or 2x, 3x).
func BenchmarkObserverRatio(b *testing.B) {
	const (
		n       = 5
		workers = 64
		turn    = 1000 // cycles
		turns   = 8
	)
	addrs := startAddrs(b, n)
	clients := make([]*redlock.Client, len(benchObservers))
	for i, tc := range benchObservers {
		clients[i] = benchClient(b, addrs, tc.obs(b))
	}
	var next, failed atomic.Int64
	spent := make([]time.Duration, len(clients))
	cycles := make([]int64, len(clients))
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for t := 0; t < turns; t++ {
			for k := range clients {
				i := (k + t) % len(clients)
				var left atomic.Int64
				left.Store(turn)
				var wg sync.WaitGroup
				start := time.Now()
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						key := fmt.Sprintf("bench:obs:%d", next.Add(1))
						for left.Add(-1) >= 0 {
							if err := cycle(clients[i], &key, &next, &failed); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				spent[i] += time.Since(start)
				cycles[i] += turn
			}
		}
	}
	b.StopTimer()
	base := float64(cycles[0]) / spent[0].Seconds()
	for i, tc := range benchObservers {
		rate := float64(cycles[i]) / spent[i].Seconds()
		b.ReportMetric(rate, tc.name+"-cycles/s")
		if i > 0 {
			b.ReportMetric(rate/base, tc.name+"/none")
		}
	}
	b.ReportMetric(float64(failed.Load()), "failed")
}

// startAddrs starts n masters and returns their addresses.
func startAddrs(b *testing.B, n int) []string {
	servers := redistest.Start(b, n)
	addrs := make([]string, n)
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}
