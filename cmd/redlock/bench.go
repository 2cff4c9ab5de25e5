package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const benchLine = "usage: redlock bench [--duration D] [--clients N] [--key K]\n\n" +
	"Acquires and releases locks as fast as it can for D, from N goroutines each on\n" +
	"a key of its own, and prints the cycles per second, p50 and p99. A progress\n" +
	"bar is drawn on stderr when it is a terminal."

type benchFlags struct {
	fs       *flag.FlagSet
	duration *time.Duration
	clients  *int
	key      *string
}

func newBenchFlags() *benchFlags {
	fs := newFlagSet("bench")
	return &benchFlags{
		fs:       fs,
		duration: fs.Duration("duration", 5*time.Second, "how long to run (> 0)"),
		clients:  fs.Int("clients", 1, "goroutines, each on a key of its own (≥ 1)"),
		key:      fs.String("key", "redlock:bench", "key prefix"),
	}
}

func benchUsage() string { return flagUsage(newBenchFlags().fs, benchLine) }

func parseBench(args []string) (runner, error) {
	f := newBenchFlags()
	if err := f.fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case f.fs.NArg() != 0:
		return nil, usageError{fmt.Sprintf("unexpected argument %q", f.fs.Arg(0))}
	case *f.duration <= 0:
		return nil, usageError{"--duration must be positive"}
	case *f.clients < 1:
		return nil, usageError{"--clients must be at least 1"}
	}
	return func(ctx context.Context, e *env) int { return cmdBench(ctx, e, *f.duration, *f.clients, *f.key) }, nil
}

// cmdBench runs acquire+release cycles and prints a p50/p99 summary, with
// a progress bar on stderr meanwhile when stderr is a terminal.
func cmdBench(ctx context.Context, e *env, duration time.Duration, clients int, key string) int {
	ctx, cancel := context.WithTimeout(ctx, duration)
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
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprintf("%s:%d", key, i)
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
	if e.isTerminal(e.stderr) {
		progress(ctx, e, start, duration, &cycles)
	} else {
		<-ctx.Done()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(float64(len(lat)-1)*p)]
	}
	fmt.Fprintf(e.stdout, "%s, %s, %v: %d cycles (%.0f/s), p50 %v, p99 %v, %s\n",
		plural(len(e.pools), "master"), plural(clients, "client"), elapsed.Round(time.Millisecond), len(lat), float64(len(lat))/elapsed.Seconds(),
		pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), plural(failures, "failure"))
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

// plural is "1 client", "2 clients".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
