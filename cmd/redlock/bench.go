package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// cmdBench runs acquire+release cycles and prints a p50/p99 summary, with
// a progress bar on stderr meanwhile.
func cmdBench(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	duration := fs.Duration("duration", 5*time.Second, "how long to run")
	clients := fs.Int("clients", 1, "goroutines, each on a key of its own")
	key := fs.String("key", "redlock:bench", "key prefix")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 0 || *duration <= 0 || *clients < 1 {
		fmt.Fprintln(e.stderr, "usage: redlock bench [--duration D > 0] [--clients N ≥ 1] [--key K]")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var (
		mu       sync.Mutex
		lat      []time.Duration
		failures int
		firstErr error
		wg       sync.WaitGroup
		cycles   atomic.Int64
	)
	start := time.Now()
	for i := 0; i < *clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprintf("%s:%d", *key, i)
			var mine []time.Duration
			fails := 0
			var ferr error
			for ctx.Err() == nil {
				t0 := time.Now()
				l, err := e.client.TryAcquire(ctx, k)
				if err == nil {
					err = l.Release(context.WithoutCancel(ctx))
				}
				if err != nil {
					if ctx.Err() == nil {
						fails++
						if ferr == nil {
							ferr = err
						}
					}
					continue
				}
				mine = append(mine, time.Since(t0))
				cycles.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			failures += fails
			if firstErr == nil {
				firstErr = ferr
			}
			mu.Unlock()
		}()
	}
	progress(ctx, e, start, *duration, &cycles)
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(float64(len(lat)-1)*p)]
	}
	fmt.Fprintf(e.stdout, "%d masters, %d clients, %v: %d cycles (%.0f/s), p50 %v, p99 %v, %d failures\n",
		len(e.pools), *clients, elapsed.Round(time.Millisecond), len(lat), float64(len(lat))/elapsed.Seconds(),
		pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), failures)
	if failures > 0 {
		fmt.Fprintf(e.stdout, "first failure: %v\n", firstErr)
		return exitFailure
	}
	return exitOK
}

// progress draws a bar of the time spent, with the cycles so far, on
// stderr until ctx ends.
func progress(ctx context.Context, e *env, start time.Time, total time.Duration, cycles *atomic.Int64) {
	const width = 30
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		done := min(time.Since(start), total)
		n := int(float64(width) * float64(done) / float64(total))
		fmt.Fprintf(e.stderr, "\r[%s%s] %4.1fs / %v  %d cycles", strings.Repeat("#", n), strings.Repeat(".", width-n), done.Seconds(), total, cycles.Load())
		select {
		case <-ctx.Done():
			fmt.Fprintln(e.stderr)
			return
		case <-tick.C:
		}
	}
}
