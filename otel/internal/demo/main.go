// Command demo shows what the otel observer tells an operator. It starts
// five throwaway redis-server masters on 127.0.0.1, runs a short workload
// through a client with the observer — workers contending for one key, a
// master frozen with SIGSTOP and thawed, a lock lost at its expiry — and
// prints the metrics of the run, as the OpenTelemetry SDK collected them,
// and the trace of one acquisition made while the master was frozen.
// `make demo` runs it after the quorum demo.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quorumlock/quorumlock/otel"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func main() {
	log.SetFlags(0)
	if err := demo(); err != nil {
		log.Fatal("demo: ", err)
	}
}

// demo starts the masters, runs the workload and stops the masters.
func demo() error {
	dir, err := os.MkdirTemp("", "quorumlock-otel-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var masters []*server
	defer func() {
		for _, s := range masters {
			s.kill()
		}
	}()
	for i := 0; i < 5; i++ {
		s, err := launch(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			return err
		}
		masters = append(masters, s)
	}
	return run(masters)
}

func run(masters []*server) error {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = mp.Shutdown(ctx) }() // a manual reader and a recorder: nothing to flush
	defer func() { _ = tp.Shutdown(ctx) }()
	obs, err := otel.New(otel.WithMeterProvider(mp), otel.WithTracerProvider(tp),
		otel.WithKeyAttribute(func(key string) string { return key })) // a handful of keys: one series each
	if err != nil {
		return err
	}
	addrs := make([]string, len(masters))
	for i, s := range masters {
		addrs[i] = s.addr
	}
	fmt.Println("\n== the otel observer: five masters on 127.0.0.1 —", strings.Join(addrs, " "))
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	c, err := redigo.NewFromAddrs(addrs, redlock.WithObserver(obs), redlock.WithLogger(logger),
		redlock.WithTimeout(50*time.Millisecond))
	if err != nil {
		return err
	}
	defer c.Close()

	fmt.Println("\n1. six workers take turns on demo:race, each holding it 20 ms")
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				l, err := c.Acquire(ctx, "demo:race", redlock.WithTTL(2*time.Second), redlock.WithWait(5*time.Second))
				if err != nil {
					log.Print(err)
					return
				}
				time.Sleep(20 * time.Millisecond)
				_ = l.Release(ctx)
			}
		}()
	}
	wg.Wait()

	fmt.Println("\n2. master 4 is frozen (SIGSTOP): 20 lock+unlock cycles on demo:key, 25 ms apart — one log line, not forty")
	if err := masters[4].signal(syscall.SIGSTOP); err != nil {
		return err
	}
	var hung *Lock
	for i := 0; i < 20; i++ {
		l, err := c.Acquire(ctx, "demo:key", redlock.WithTTL(2*time.Second))
		if err != nil {
			return err
		}
		if i == 10 {
			hung = &Lock{l, time.Now()}
		}
		_ = l.Release(ctx)
		time.Sleep(25 * time.Millisecond)
	}
	fmt.Printf("   the 11th lock's story: waited %v, %d attempt(s), granted by masters %v\n",
		hung.Waited().Round(10*time.Microsecond), hung.Attempts(), hung.Granted())
	time.Sleep(100 * time.Millisecond) // the frozen master's commands time out
	fmt.Println("   master 4 thaws; the next answer is logged with the count of failures")
	if err := masters[4].signal(syscall.SIGCONT); err != nil {
		return err
	}
	for i := 0; i < 5; i++ {
		l, err := c.Acquire(ctx, "demo:key")
		if err != nil {
			return err
		}
		_ = l.Release(ctx)
		time.Sleep(20 * time.Millisecond)
	}

	fmt.Println("\n3. a lock on demo:lost is held past its TTL of 200 ms: lost at the next Extend")
	l, err := c.Acquire(ctx, "demo:lost", redlock.WithTTL(200*time.Millisecond))
	if err != nil {
		return err
	}
	time.Sleep(250 * time.Millisecond)
	if err := l.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrLockLost) {
		return fmt.Errorf("extend of an expired lock: %v", err) //nolint:errorlint // err is shown, and may be nil
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return err
	}
	fmt.Println("\n== the metrics of this run (OpenTelemetry SDK, manual reader)")
	printMetrics(rm)
	fmt.Println("\n== the trace of an acquisition while master 4 was frozen")
	for _, s := range spans.Ended() {
		if s.Name() == "quorumlock acquire" && !s.StartTime().Before(hung.started.Add(-hung.Waited()-time.Millisecond)) {
			printSpan(s)
			break
		}
	}
	return nil
}

// Lock is a lock and when it was returned.
type Lock struct {
	*redlock.Lock
	started time.Time
}

// printMetrics prints each data point on one line, as a Prometheus scrape
// would name it: counters and gauges with their value, histograms with
// their count and estimated p50 and p99.
func printMetrics(rm metricdata.ResourceMetrics) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var lines []string
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s%s %d", m.Name, attrs(p.Attributes), p.Value))
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s%s %d", m.Name, attrs(p.Attributes), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s%s count=%d p50=%s p99=%s", m.Name, attrs(p.Attributes), p.Count,
						seconds(quantile(p.Bounds, p.BucketCounts, 0.5)), seconds(quantile(p.Bounds, p.BucketCounts, 0.99))))
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					mean := float64(p.Sum) / float64(max(p.Count, 1))
					lines = append(lines, fmt.Sprintf("%s%s count=%d mean=%.2f max=%d", m.Name, attrs(p.Attributes), p.Count, mean, maxOf(p.Max)))
				}
			}
			sort.Strings(lines)
			for _, l := range lines {
				fmt.Println("  " + l)
			}
		}
	}
}

func maxOf(e metricdata.Extrema[int64]) int64 {
	v, _ := e.Value()
	return v
}

// attrs formats an attribute set as {k="v",...}, without server.port
// (server.address:port is the master's index's address anyway).
func attrs(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		if kv.Key == otel.KeyServerPort {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%q", kv.Key, kv.Value.Emit())) //nolint:staticcheck // SA1019: Value.String is newer than the oldest otel this module supports
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// quantile estimates the q-quantile of a histogram from its buckets,
// interpolating within the bucket it falls in.
func quantile(bounds []float64, counts []uint64, q float64) float64 {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen float64
	for i, c := range counts {
		if seen+float64(c) >= rank && c > 0 {
			lo, hi := 0.0, 0.0
			if i > 0 {
				lo = bounds[i-1]
			}
			if i < len(bounds) {
				hi = bounds[i]
			} else {
				return lo // above the last bound
			}
			return lo + (hi-lo)*(rank-seen)/float64(c)
		}
		seen += float64(c)
	}
	return bounds[len(bounds)-1]
}

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(10 * time.Microsecond).String()
}

// printSpan draws a span and its master-answer events on a time line.
func printSpan(s sdktrace.ReadOnlySpan) {
	const width = 40
	total := s.EndTime().Sub(s.StartTime())
	at := func(t time.Time) int {
		if total <= 0 {
			return 0
		}
		return min(width, int(float64(width)*float64(t.Sub(s.StartTime()))/float64(total)))
	}
	var a []string
	for _, kv := range s.Attributes() {
		a = append(a, fmt.Sprintf("%s=%s", strings.TrimPrefix(string(kv.Key), "quorumlock."), kv.Value.Emit())) //nolint:staticcheck // SA1019: as above
	}
	fmt.Printf("  %s  [%s]  %v\n", s.Name(), strings.Join(a, " "), total.Round(10*time.Microsecond))
	fmt.Printf("  %-34s |%s|\n", "", strings.Repeat("─", width))
	evs := slices.Clone(s.Events())
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time.Before(evs[j].Time) })
	for _, ev := range evs {
		set := attribute.NewSet(ev.Attributes...)
		idx, _ := set.Value(otel.KeyMasterIndex)
		addr, _ := set.Value(otel.KeyServerAddress)
		port, _ := set.Value(otel.KeyServerPort)
		ans, _ := set.Value(otel.KeyMasterAnswer)
		lat, ok := set.Value(otel.KeyMasterLatency)
		what := ans.AsString()
		if ok {
			what += " " + seconds(lat.AsFloat64())
		} else {
			what += " (no answer when the quorum decided)"
		}
		label := fmt.Sprintf("master %d %s:%d", idx.AsInt64(), addr.AsString(), port.AsInt64())
		x := at(ev.Time)
		fmt.Printf("  %-34s |%s●%s| %s\n", label, strings.Repeat(" ", max(0, x-1)), strings.Repeat(" ", width-max(1, x)), what)
	}
}

// server is a throwaway redis-server process.
type server struct {
	addr string
	cmd  *exec.Cmd
}

// launch starts a redis-server on a free port of 127.0.0.1, its files in
// dir, and returns once it answers PING.
func launch(dir string) (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (apt-get install -y redis-server): %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--daemonize", "no")
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		s := &server{addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if conn, err := redis.Dial("tcp", s.addr, redis.DialConnectTimeout(time.Second)); err == nil {
				_, err = conn.Do("PING")
				conn.Close()
				if err == nil {
					return s, nil
				}
			}
		}
		s.kill()
	}
	return nil, errors.New("redis-server did not start")
}

func (s *server) signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}
