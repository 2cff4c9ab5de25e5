package adaptertest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/redlock"
)

// AcquisitionRate logs how many acquisitions c makes per second, by one
// caller and by 16, with all its masters and then for 10 s with one
// stopped (stop, then resume): a master stopped must not hold the others
// up. A measurement: it fails nothing.
func AcquisitionRate(t testing.TB, c *redlock.Client, stop, resume func()) {
	t.Helper()
	ctx := context.Background()
	rate := func(workers int, d time.Duration) (ok, fail int64) {
		var wg sync.WaitGroup
		var okN, failN atomic.Int64
		end := time.Now().Add(d)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(end); i++ {
					l, err := c.TryAcquire(ctx, fmt.Sprint("rate:", w, ":", i), redlock.WithTTL(5*time.Second))
					if err != nil {
						failN.Add(1)
						continue
					}
					okN.Add(1)
					_ = l.Release(ctx)
				}
			}()
		}
		wg.Wait()
		return okN.Load(), failN.Load()
	}
	for _, workers := range []int{1, 16} {
		ok, fail := rate(workers, 3*time.Second)
		t.Logf("%d callers, all masters: %d ok, %d failed in 3 s (%.0f/s)", workers, ok, fail, float64(ok)/3)
		stop()
		ok, fail = rate(workers, 10*time.Second)
		resume()
		t.Logf("%d callers, one stopped: %d ok, %d failed in 10 s (%.0f/s)", workers, ok, fail, float64(ok)/10)
	}
}

// BoundedBesideALateMaster acquires on c for 12 s, one of whose masters
// answers everything late (hostile.Delay): the acquisitions go on on the
// others, and the goroutines stay as many as they were.
func BoundedBesideALateMaster(t testing.TB, c *redlock.Client) {
	t.Helper()
	ctx := context.Background()
	var ms runtime.MemStats
	baseG := runtime.NumGoroutine()
	ok, fail, maxG := 0, 0, 0
	start := time.Now()
	for sec := 0; time.Since(start) < 12*time.Second; {
		l, err := c.TryAcquire(ctx, fmt.Sprint("forever:", ok+fail), redlock.WithTTL(5*time.Second))
		if err != nil {
			fail++
			if fail < 5 {
				t.Log(err)
			}
		} else {
			ok++
			_ = l.Release(ctx)
		}
		if s := int(time.Since(start) / time.Second); s != sec {
			sec = s
			runtime.ReadMemStats(&ms)
			g := runtime.NumGoroutine()
			maxG = max(maxG, g)
			t.Logf("%2ds: %d ok %d failed, %d goroutines (%d at start), heap %d KiB", s, ok, fail, g, baseG, ms.HeapInuse>>10)
		}
	}
	if maxG > baseG+50 {
		t.Fatalf("goroutines grew to %d from %d", maxG, baseG)
	}
	if fail > ok/10 {
		t.Fatalf("%d of %d acquisitions failed with one master answering late", fail, ok+fail)
	}
}

// GarbageProxy returns the address of a proxy in front of the master at
// addr that answers every SET and EVALSHA after 150 ms with bytes that
// are no RESP reply (a client of it must speak RESP2). It stops when the
// test ends.
func GarbageProxy(t testing.TB, addr string) string {
	t.Helper()
	quit := make(chan struct{})
	t.Cleanup(func() { close(quit) })
	px := hostile.NewProxy(t, addr, func(c *hostile.Conn, cmd []string) hostile.Verdict {
		if strings.EqualFold(cmd[0], "SET") || strings.EqualFold(cmd[0], "EVALSHA") {
			hostile.Hold(150*time.Millisecond, quit)
			_ = c.Write("?garbage\x00\xff\r\n")
			return hostile.Swallow
		}
		return hostile.Forward
	})
	return px.Addr()
}

// GarbageIsNoGrant checks a Client one of whose three masters is a
// GarbageProxy: it does not take the garbage for a grant, does not
// panic, and at least 15 of 20 acquisitions succeed on the others.
func GarbageIsNoGrant(t testing.TB, c *redlock.Client) {
	t.Helper()
	ctx := context.Background()
	okN := 0
	for i := range 20 {
		l, err := c.TryAcquire(ctx, fmt.Sprint("garbage:", i), redlock.WithTTL(2*time.Second))
		if err != nil {
			t.Logf("attempt %d: %v", i, err)
			continue
		}
		okN++
		_ = l.Release(ctx)
	}
	if okN < 15 {
		t.Fatalf("%d of 20 acquisitions succeeded with one master answering garbage late", okN)
	}
}
