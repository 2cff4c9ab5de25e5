package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Every master of three stopped (SIGSTOP) while 16 goroutines keep
// trying, each for a second: none acquires. How many fail at once,
// unsent ("known down ... not tried"), rather than at their wait is
// logged, with each master's silence at the first: the masters' silences
// can differ by more than the round's wait (a woken waiter's attempts
// asked the pilot alone, so the others were silent longer), and then the
// more silent ones are down beyond the host; docs/design.md, "down is
// beyond the host", names the cases. TestBusyHost_everyMasterSilentAtOnceIsNotDown
// checks one call sent to masters stopped together.
func TestBusyHost_everyMasterStoppedManyCallersNeverAcquire(t *testing.T) {
	redistest.SkipShort(t)
	for run := range 3 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			_, c := warmThenStopEvery(t, 100*time.Millisecond)
			ctx := context.Background()
			// As a caller would: one failed TryAcquire, then an Acquire
			// that waits (led attempts) until its ctx ends.
			if _, err := c.TryAcquire(ctx, "busyhost:many:try"); err == nil {
				t.Fatal("acquired with every master stopped")
			}
			actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err := c.Acquire(actx, "busyhost:many:acquire")
			cancel()
			t.Logf("Acquire: %v", err)
			tries, unsent, granted, first := tryForASecond(c, "busyhost:many")
			t.Logf("every master stopped, 16 goroutines for 1 s: %d tries, %d failed unsent (the first: %s)", tries, unsent, first)
			if granted > 0 {
				t.Errorf("%d of %d acquisitions succeeded with every master stopped", granted, tries)
			}
		})
	}
}

// tryForASecond runs TryAcquire on keys of prefix from 16 goroutines for
// a second, and returns how many were tried, how many failed unsent ("not
// tried"), and, at the first of those, each master's silence, the host's
// and the error.
func tryForASecond(c *Client, prefix string) (tries, unsent, granted int64, first string) {
	var nTries, nUnsent, nGranted atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	end := time.Now().Add(time.Second)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				nTries.Add(1)
				l, err := c.TryAcquire(context.Background(), fmt.Sprintf("%s:%d:%d", prefix, g, i))
				if err == nil {
					nGranted.Add(1)
					_ = l.Release(context.Background())
					continue
				}
				if !strings.Contains(err.Error(), "not tried") {
					continue
				}
				nUnsent.Add(1)
				once.Do(func() {
					var b strings.Builder
					for i := range c.masters {
						fmt.Fprintf(&b, "master %d silent %v; ", i, c.masters[i].t.(Silencer).Silence().Round(time.Millisecond))
					}
					fmt.Fprintf(&b, "host %v: %v", c.hostSilence().Round(time.Millisecond), err)
					first = b.String()
				})
			}
		}()
	}
	wg.Wait()
	return nTries.Load(), nUnsent.Load(), nGranted.Load(), first
}
