package goredis

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// opaqueClient hides a *redis.Client's type, so that NewTransport does not
// know it reaches one master through one ordered lane of batches: its
// transport is not Ordered, and the Client chains its rounds.
type opaqueClient struct{ *redis.Client }

// A goredis.New client (Ordered), one over the same go-redis clients
// hidden (not Ordered) and redigo clients of both paths take one key —
// plain, fenced, and reentrant owners — while one master at a time is
// frozen (SIGSTOP) for shorter and longer than the per-master timeout: no
// two holders are valid at once (checked against Until), fences only grow,
// and every client closes within a bound.
func TestExclusion_goredisAndRedigoClientsUnderFrozenMasters(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	const timeout = 60 * time.Millisecond
	ms := startMasters(t, 3)
	addrs := make([]string, len(ms.servers))
	opaque := make([]redis.UniversalClient, len(ms.servers))
	for i, s := range ms.servers {
		addrs[i] = s.addr
		rc := redis.NewClient(&redis.Options{Addr: s.addr, ReadTimeout: time.Second, WriteTimeout: time.Second})
		t.Cleanup(func() { rc.Close() })
		opaque[i] = opaqueClient{rc}
	}
	mk := func(c *redlock.Client, err error) *redlock.Client {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	clients := map[string]*redlock.Client{
		"goredis":   mk(New(ms.clients, redlock.WithTimeout(timeout))),
		"opaque":    mk(New(opaque, redlock.WithTimeout(timeout))),
		"pipelined": mk(redigo.NewFromAddrs(addrs, redlock.WithTimeout(timeout))),
		"pooled":    mk(redigo.NewFromAddrs(addrs, redlock.WithTimeout(timeout), redigo.WithPipelining(false))),
	}
	for _, c := range clients {
		t.Cleanup(func() { c.Close() })
	}

	// One master frozen at a time.
	quit, paused := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(paused)
		for i := 0; ; i++ {
			s := ms.servers[i%3]
			s.stop()
			select {
			case <-quit:
			case <-time.After([]time.Duration{30, 250, 80}[i%3] * time.Millisecond):
			}
			s.cont()
			select {
			case <-quit:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	stopPausing := sync.OnceFunc(func() { close(quit); <-paused })
	defer stopPausing()

	type kind struct {
		name string
		take func(ctx context.Context, c *redlock.Client, who string) (until time.Time, fence uint64, release func(), err error)
	}
	plain := func(fenced bool) func(context.Context, *redlock.Client, string) (time.Time, uint64, func(), error) {
		return func(ctx context.Context, c *redlock.Client, _ string) (time.Time, uint64, func(), error) {
			opts := []redlock.LockOption{redlock.WithTTL(400 * time.Millisecond), redlock.WithWait(time.Second)}
			if fenced {
				opts = append(opts, redlock.WithFencing())
			}
			l, err := c.Acquire(ctx, "k", opts...)
			if err != nil {
				return time.Time{}, 0, nil, err
			}
			var f uint64
			if fenced {
				f = l.Fence()
			}
			return l.Until(), f, func() { _ = l.Release(ctx) }, nil
		}
	}
	kinds := []kind{
		{"plain", plain(false)},
		{"fenced", plain(true)},
		{"reentrant", func(ctx context.Context, c *redlock.Client, who string) (time.Time, uint64, func(), error) {
			r, err := c.NewReentrant("k", who, redlock.WithTTL(400*time.Millisecond), redlock.WithWait(time.Second))
			if err != nil {
				return time.Time{}, 0, nil, err
			}
			if err := r.Acquire(ctx); err != nil {
				return time.Time{}, 0, nil, err
			}
			l := r.Lock()
			if l == nil {
				return time.Time{}, 0, func() { _ = r.Release(ctx) }, nil
			}
			return l.Until(), 0, func() {
				for i := 0; i < 5 && r.Count() > 0; i++ {
					_ = r.Release(ctx)
				}
			}, nil
		}},
	}
	for _, k := range kinds {
		var mu sync.Mutex
		var inside, holds int
		var validUntil time.Time
		var lastFence uint64
		var failed atomic.Int64
		end := time.Now().Add(2500 * time.Millisecond)
		var wg sync.WaitGroup
		for name, c := range clients {
			for g := 0; g < 2; g++ {
				who := name + "-" + string(rune('a'+g))
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(end) {
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
						until, fence, release, err := k.take(ctx, c, who)
						if err != nil {
							failed.Add(1)
							if release != nil {
								release()
							}
							cancel()
							continue
						}
						mu.Lock()
						now := time.Now()
						entered := now.Before(until)
						if entered {
							if inside > 0 && now.Before(validUntil) {
								t.Errorf("%s: %s holds the lock (until %v) while another holder's is valid until %v",
									k.name, who, until.Format("15:04:05.000"), validUntil.Format("15:04:05.000"))
							}
							if fence != 0 {
								if fence <= lastFence {
									t.Errorf("%s: %s got fence %d after %d", k.name, who, fence, lastFence)
								}
								lastFence = fence
							}
							inside++
							holds++
							if until.After(validUntil) {
								validUntil = until
							}
						}
						mu.Unlock()
						if entered {
							time.Sleep(2 * time.Millisecond) // the subject: a hold long enough for an overlap to show
							mu.Lock()
							if inside--; inside == 0 {
								validUntil = time.Time{}
							}
							mu.Unlock()
						}
						release()
						cancel()
					}
				}()
			}
		}
		wg.Wait()
		t.Logf("%s: %d holds, %d attempts failed", k.name, holds, failed.Load())
		if holds < 10 {
			t.Errorf("%s: only %d holds in 2.5 s", k.name, holds)
		}
	}
	stopPausing()
	for name, c := range clients {
		done := make(chan struct{})
		go func() { c.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Close did not return within 5 s", name)
		}
	}
}
