package redlock_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// Close called from many goroutines at once, while calls from many
// goroutines are still dialing a master that accepts the TCP connection
// and never answers the TLS handshake: every Close and every call returns
// within the per-master timeout and a margin of Close beginning, the
// calls fail (nothing was granted by the silent master alone), calls
// after Close fail with ErrClosed, and no goroutine of the client — nor a
// connection it left open, which would keep the silent master's reader —
// outlives Close. Both paths; the silent master alone and beside two
// TLS masters that answer.
func TestClose_concurrentEndsDialsInTheirHandshake(t *testing.T) {
	certs := redistest.NewCerts(t)
	real := redistest.Start(t, 2, redistest.WithTLS(certs, true))
	cfg, err := pool.TLSFiles(certs.CAFile, certs.CertFile, certs.KeyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	const callers, closers = 8, 8
	bound := silentTLSTimeout + silentTLSMargin
	for _, set := range []struct {
		name   string
		silent func(silent string) []string
		grants bool // the masters that answer make a quorum
	}{
		{"silent alone", func(silent string) []string { return []string{silent} }, false},
		{"silent beside two", func(silent string) []string { return []string{real[0].Addr(), silent, real[1].Addr()} }, true},
	} {
		t.Run(set.name, func(t *testing.T) {
			forEachPath(t, func(t *testing.T, path connPath) {
				ctx := ctxT(t)
				var accepted atomic.Int64
				silent := hostile.Serve(t, func(c net.Conn, _ <-chan struct{}) {
					accepted.Add(1)
					_, _ = io.Copy(io.Discard, c)
				})
				ignore := goleak.IgnoreCurrent()
				var urls []string
				for _, a := range set.silent(silent) {
					urls = append(urls, "rediss://"+a)
				}
				c, err := redigo.NewFromAddrs(urls, redlock.WithTimeout(silentTLSTimeout),
					redigo.WithPoolOptions(pool.WithTLS(cfg)), path.Option())
				if err != nil {
					t.Fatal(err)
				}
				key := "closerace:" + t.Name()
				var calls sync.WaitGroup
				callEnded := make([]time.Time, callers)
				callErr := make([]error, callers)
				for g := range callers {
					calls.Add(1)
					go func() {
						defer calls.Done()
						_, err := c.TryAcquire(ctx, key)
						callEnded[g], callErr[g] = time.Now(), err
					}()
				}
				// A dial of the calls to the silent master (the first
				// call's identification of the masters) is in its
				// handshake.
				if !redistest.WaitFor(ctx, func() bool { return accepted.Load() > 0 }) {
					t.Fatal("no call dialed the silent master")
				}
				closeStart := time.Now()
				var closes sync.WaitGroup
				closeTook := make([]time.Duration, closers)
				for g := range closers {
					closes.Add(1)
					go func() {
						defer closes.Done()
						s := time.Now()
						c.Close()
						closeTook[g] = time.Since(s)
					}()
				}
				closes.Wait()
				calls.Wait()
				for g, d := range closeTook {
					if d > bound {
						t.Errorf("Close %d took %v, want at most %v", g, d, bound)
					}
				}
				for g := range callers {
					if d := callEnded[g].Sub(closeStart); d > bound {
						t.Errorf("call %d ended %v after Close began, want at most %v (err %v)", g, d, bound, callErr[g])
					}
					if callErr[g] == nil && !set.grants {
						t.Errorf("call %d succeeded", g)
					}
				}
				t.Logf("Close: %v; first call error: %v", closeTook, callErr[0])
				if _, err := c.TryAcquire(ctx, key); !errors.Is(err, redlock.ErrClosed) {
					t.Errorf("TryAcquire after Close: %v, want ErrClosed", err)
				}
				if err := goleak.Find(ignore); err != nil {
					t.Errorf("goroutines left after Close: %v", err)
				}
			})
		})
	}
}
