package redlock_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// A master that accepts the TCP connection and never answers the TLS
// handshake holds neither Close nor a call beyond the per-master timeout
// (plus a margin for a busy machine; a client's first call identifies the
// masters first), on every transport the redigo pools give: pipelined and
// pooled, over the package's own pools and over a caller's *redis.Pool
// whose dial honours its context. The dials to the silent master are in
// their handshake when Close begins.

// silentTLSTimeout is the per-master timeout of these tests: large beside
// the noise of a loaded machine. A pooled command's wait for a connection
// that Close did not end took twice the timeout (about 2 s here).
const silentTLSTimeout = time.Second

// silentTLSMargin is what a call or Close may take beyond the timeout. The
// contract is 100 ms (met on a quiet machine: 1–62 ms beyond a 300 ms
// timeout); the test allows more so that a loaded machine's scheduling
// delays do not fail it, and still fails a Close that waits for the
// handshake.
const silentTLSMargin = 400 * time.Millisecond

// userTLSPool is a caller's *redis.Pool of the TLS master at addr, whose
// dial does the handshake with its context (tls.Dialer).
func userTLSPool(addr string, cfg *tls.Config) *redis.Pool {
	return &redis.Pool{
		MaxIdle: 4,
		DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, redis.DialContextFunc(
				func(ctx context.Context, network, addr string) (net.Conn, error) {
					return (&tls.Dialer{Config: cfg}).DialContext(ctx, network, addr)
				}))
		},
	}
}

func TestDial_silentTLSMasterHoldsNoCallNorClosePastTheTimeout(t *testing.T) {
	certs := redistest.NewCerts(t)
	real := redistest.Start(t, 2, redistest.WithTLS(certs, true))
	silent := hostile.Silent(t)
	cfg, err := pool.TLSFiles(certs.CAFile, certs.CertFile, certs.KeyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	addrs := []string{real[0].Addr(), silent, real[1].Addr()}
	bound := silentTLSTimeout + silentTLSMargin

	clients := map[string]func(t *testing.T, path connPath, addrs []string) *redlock.Client{
		"package pools": func(t *testing.T, path connPath, addrs []string) *redlock.Client {
			var urls []string
			for _, a := range addrs {
				urls = append(urls, "rediss://"+a)
			}
			c, err := redigo.NewFromAddrs(urls, redlock.WithTimeout(silentTLSTimeout),
				redigo.WithPoolOptions(pool.WithTLS(cfg)), path.Option())
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		"caller's pools": func(t *testing.T, path connPath, addrs []string) *redlock.Client {
			var pools []pool.Pool
			for _, a := range addrs {
				p := userTLSPool(a, cfg)
				t.Cleanup(func() { p.Close() })
				pools = append(pools, p)
			}
			c, err := redigo.New(pools, redlock.WithTimeout(silentTLSTimeout), path.Option())
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
	}
	for name, newClient := range clients {
		t.Run(name, func(t *testing.T) {
			forEachPath(t, func(t *testing.T, path connPath) {
				ctx := ctxT(t)
				timedUpTo := func(bound time.Duration, what string, f func() error) error {
					t.Helper()
					start := time.Now()
					err := f()
					d := time.Since(start)
					t.Logf("%s: %v", what, d)
					if d > bound {
						t.Errorf("%s took %v, want at most %v (per-master timeout %v)", what, d, bound, silentTLSTimeout)
					}
					return err
				}
				timed := func(what string, f func() error) error {
					t.Helper()
					return timedUpTo(bound, what, f)
				}
				// The first call identifies the masters before its round
				// (up to a per-master timeout and 100 ms, internal/ident):
				// the two waits add up.
				first := func(what string, f func() error) error {
					t.Helper()
					return timedUpTo(2*bound, what, f)
				}

				// One silent master of three: the other two decide.
				c := newClient(t, path, addrs)
				key := "silenttls:" + t.Name()
				var l *redlock.Lock
				if err := first("TryAcquire", func() (err error) { l, err = c.TryAcquire(ctx, key); return err }); err != nil {
					t.Fatal(err)
				}
				if err := timed("Extend", func() error { return l.Extend(ctx, 5*time.Second) }); err != nil {
					t.Fatal(err)
				}
				if err := timed("TryAcquire of a held key", func() error { _, err := c.TryAcquire(ctx, key); return err }); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("TryAcquire of a held key: %v, want ErrNotAcquired", err)
				}
				if err := timed("Release", func() error { return l.Release(ctx) }); err != nil {
					t.Fatal(err)
				}
				if err := timed("Acquire", func() (err error) { l, err = c.Acquire(ctx, key); return err }); err != nil {
					t.Fatal(err)
				}
				if err := timed("Release", func() error { return l.Release(ctx) }); err != nil {
					t.Fatal(err)
				}
				timed("Close", c.Close)

				// The silent master alone: every call waits for it, to
				// the timeout, and no longer.
				c = newClient(t, path, []string{silent})
				if err := first("TryAcquire, silent master alone", func() error { _, err := c.TryAcquire(ctx, key); return err }); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("TryAcquire of the silent master: %v, want ErrNotAcquired", err)
				}
				if err := timed("TryAcquire again, silent master alone", func() error { _, err := c.TryAcquire(ctx, key); return err }); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("TryAcquire of the silent master: %v, want ErrNotAcquired", err)
				}
				timed("Close, silent master alone", c.Close)
			})
		})
	}
}
