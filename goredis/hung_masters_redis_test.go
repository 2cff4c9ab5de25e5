package goredis

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// goredis.Transport is a transport.Silencer: the
// Client waits on past the per-master timeout for a master whose
// Silence is below it. A hung master must still be counted failed at
// about the timeout, on an idle process and on a busy one, or every
// round with it waits up to lateBound.

// spinGoroutines keeps n goroutines busy until the returned stop is
// called.
func spinGoroutines(n int) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for !done.Load() {
				x++
			}
			_ = x
		}()
	}
	return func() { done.Store(true); wg.Wait() }
}

// hungRoundKey numbers the keys of tryRoundsFor, so that no round
// meets a key an earlier one left.
var hungRoundKey atomic.Int64

// tryRoundsFor runs TryAcquire on fresh keys for d and returns the
// latencies of the rounds and how many acquired. The TTL, 2 s, caps the
// Client's adaptive bound at 200 ms (a tenth of it): on a loaded machine
// the masters' slow answers before they hung may raise the wait of the
// rounds after, by design, and no further.
func tryRoundsFor(t *testing.T, c *redlock.Client, d time.Duration) (lat []time.Duration, ok int) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		start := time.Now()
		l, err := c.TryAcquire(context.Background(), fmt.Sprint("hung-", hungRoundKey.Add(1)), redlock.WithTTL(2*time.Second))
		lat = append(lat, time.Since(start))
		if err == nil {
			ok++
			_ = l.Release(context.Background())
		}
	}
	return lat, ok
}

func percentile(lat []time.Duration, p float64) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

type hungClientKind struct {
	name string
	make func(t *testing.T, addrs []string, timeout time.Duration) *redlock.Client
}

var hungClientKinds = []hungClientKind{
	{"core", func(t *testing.T, addrs []string, timeout time.Duration) *redlock.Client {
		c, err := redigo.NewFromAddrs(addrs, redlock.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}},
	{"goredis-ctx-off", goredisClientFor(false)},
	{"goredis-ctx-on", goredisClientFor(true)},
}

func goredisClientFor(ctxOn bool) func(t *testing.T, addrs []string, timeout time.Duration) *redlock.Client {
	return func(t *testing.T, addrs []string, timeout time.Duration) *redlock.Client {
		var cs []redis.UniversalClient
		for _, a := range addrs {
			rc := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: ctxOn, ReadTimeout: time.Second})
			t.Cleanup(func() { rc.Close() })
			cs = append(cs, rc)
		}
		c, err := New(cs, redlock.WithTimeout(timeout))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
}

// TestTryAcquire_hungMastersFailAtTheTimeout measures TryAcquire with 1
// and 2 of 3 masters hung (SIGSTOP), 50 ms timeout, with and without
// GOMAXPROCS spinning goroutines, on the core's pipelined transport and
// on the adapter. With one hung, a round takes what the healthy two take
// (early quorum); with two, it fails at about the timeout, not at
// lateBound (1 s). The bounds are generous (a loaded 2-core machine);
// QUORUMLOCK_MEASURE=1 logs the numbers.
func TestTryAcquire_hungMastersFailAtTheTimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	run := 700 * time.Millisecond
	if testing.Short() {
		run = 500 * time.Millisecond
	}
	for _, k := range hungClientKinds {
		for _, hung := range []int{1, 2} {
			for _, spin := range spinCounts() {
				t.Run(fmt.Sprintf("%s/hung=%d/spin=%d", k.name, hung, spin), func(t *testing.T) {
					ss, addrs := startHungMasters(t)
					c := k.make(t, addrs, timeout)
					defer c.Close()
					// Warm up: connections dialed, scripts loaded (a 50 ms
					// round on a busy machine may fail: try for a while).
					if !poll(10*time.Second, func() bool { _, ok := tryRoundsFor(t, c, 50*time.Millisecond); return ok > 0 }) {
						t.Fatal("no acquisition with every master up")
					}
					stop := spinGoroutines(spin)
					// A control beside the measurement: the same rounds with
					// every master up, so that a machine too busy to answer
					// within the timeout is not taken for rounds waiting on
					// the hung master.
					ctlLat, ctlOK := tryRoundsFor(t, c, run/2)
					for _, s := range ss[:hung] {
						s.stop()
						defer s.cont()
					}
					lat, ok := tryRoundsFor(t, c, run)
					stop()
					p50, p99, mx := percentile(lat, .5), percentile(lat, .99), percentile(lat, 1)
					if os.Getenv("QUORUMLOCK_MEASURE") != "" {
						t.Logf("%s hung=%d spin=%d: %d rounds, %d acquired, p50 %v p99 %v max %v",
							k.name, hung, spin, len(lat), ok, p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), mx.Round(100*time.Microsecond))
					}
					if hung == 1 && 3*ok*len(ctlLat) < ctlOK*len(lat) {
						t.Errorf("1 of 3 hung: %d of %d rounds acquired, against %d of %d with every master up",
							ok, len(lat), ctlOK, len(ctlLat))
					}
					if hung == 2 && ok > 0 {
						t.Errorf("2 of 3 hung: %d rounds acquired", ok)
					}
					// lateBound is 1 s: a median near it means every
					// round waited on the hung masters.
					if p50 > 400*time.Millisecond {
						t.Errorf("median round %v with %d of 3 hung, timeout %v (p99 %v)", p50, hung, timeout, p99)
					}
				})
			}
		}
	}
}

// TestTryAcquire_firstRoundOnNewlyHungMastersFailsAtTheTimeout times the round that meets two
// newly hung masters of three (its commands are sent to them: nothing is
// down yet), with and without spinning goroutines: it must fail at about
// the timeout. Each iteration stops the two masters, times one
// TryAcquire, and lets them run again.
func TestTryAcquire_firstRoundOnNewlyHungMastersFailsAtTheTimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	iters := 8
	if testing.Short() {
		iters = 5
	}
	for _, k := range hungClientKinds {
		for _, spin := range spinCounts() {
			t.Run(fmt.Sprintf("%s/spin=%d", k.name, spin), func(t *testing.T) {
				ss, addrs := startHungMasters(t)
				var lat []time.Duration
				for i := range iters {
					// A client of its own each time: the previous
					// round's late answers (the stopped masters', read
					// once they run again) raised its adaptive bound,
					// as a majority answering late does; this test is
					// about a first round after fast answers.
					c := k.make(t, addrs, timeout)
					defer c.Close()
					// Every master answers again (what was buffered
					// while stopped is read out).
					try := 0
					if !poll(5*time.Second, func() bool {
						try++
						l, err := c.TryAcquire(context.Background(), fmt.Sprint("hung-warm-", i, "-", try))
						if err != nil {
							return false
						}
						_ = l.Release(context.Background())
						return true
					}) {
						t.Fatal("no acquisition with every master up")
					}
					time.Sleep(20 * time.Millisecond)
					ss[0].stop()
					ss[1].stop()
					stop := spinGoroutines(spin)
					start := time.Now()
					_, err := c.TryAcquire(context.Background(), fmt.Sprint("hung-first-", i), redlock.WithTTL(10*time.Second))
					lat = append(lat, time.Since(start))
					stop()
					ss[0].cont()
					ss[1].cont()
					if err == nil {
						t.Fatal("acquired with 2 of 3 masters hung")
					}
				}
				p50, p99 := percentile(lat, .5), percentile(lat, 1)
				if os.Getenv("QUORUMLOCK_MEASURE") != "" {
					t.Logf("%s spin=%d: %d first rounds on 2 hung of 3: p50 %v max %v all %v",
						k.name, spin, len(lat), p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), lat)
				}
				if p50 > 400*time.Millisecond {
					t.Errorf("median first round on 2 hung masters %v, timeout %v (max %v)", p50, timeout, p99)
				}
			})
		}
	}
}

// spinCounts is how many goroutines spin in the measurements: none,
// and GOMAXPROCS (QUORUMLOCK_SPIN=n sets the second).
func spinCounts() []int {
	n := runtime.GOMAXPROCS(0)
	if v, err := strconv.Atoi(os.Getenv("QUORUMLOCK_SPIN")); err == nil {
		n = v
	}
	return []int{0, n}
}

// startHungMasters starts three masters.
func startHungMasters(t *testing.T) (ss []*server, addrs []string) {
	for range 3 {
		s := startServer(t)
		ss = append(ss, s)
		addrs = append(addrs, s.addr)
	}
	return ss, addrs
}
