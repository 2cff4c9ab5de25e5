package fence_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/internal/fencetest"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func TestMain(m *testing.M) {
	redistest.ShortExamples()
	goleak.VerifyTestMain(m)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newStore(t *testing.T, srv *redistest.Server) *fence.Store {
	t.Helper()
	p := srv.Pool()
	t.Cleanup(func() { p.Close() })
	s, err := fence.NewStore(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStore_refusesLowerTokensAndKeepsData(t *testing.T) {
	ctx := ctxT(t)
	srv := redistest.StartOne(t)
	s := newStore(t, srv)
	if err := s.Set(ctx, "doc", 5, []byte("five"), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ctx, "doc", 5, []byte("five again"), 0); err != nil {
		t.Fatalf("same token again: %v", err)
	}
	err := s.Set(ctx, "doc", 4, []byte("four"), 0)
	var se *fence.StaleError
	if !errors.Is(err, fence.ErrStale) || !errors.As(err, &se) || se.Token != 4 || se.Highest != 5 || se.Resource != "doc" {
		t.Fatalf("lower token: err = %v, want a StaleError 4 < 5", err)
	}
	if v, ok, err := s.Get(ctx, "doc"); err != nil || !ok || string(v) != "five again" {
		t.Fatalf("Get = %q, %v, %v; want the data of token 5", v, ok, err)
	}
	if err := s.Set(ctx, "doc", 1<<60, []byte("big"), time.Minute); err != nil {
		t.Fatalf("a token beyond 2^53: %v", err)
	}
	if err := s.Set(ctx, "doc", 1<<59, []byte("smaller"), 0); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("tokens compare exactly beyond 2^53: err = %v", err)
	}
	if h, err := s.Highest(ctx, "doc"); err != nil || h != 1<<60 {
		t.Fatalf("Highest = %d, %v", h, err)
	}
	if ttl, err := srv.Do("PTTL", "doc"); err != nil || ttl.(int64) <= 0 {
		t.Fatalf("PTTL = %v, %v; want the TTL set", ttl, err)
	}
	if _, ok, err := s.Get(ctx, "missing"); ok || err != nil {
		t.Fatalf("Get of a missing key = %v, %v", ok, err)
	}
}

func TestStore_withoutDeadlineAfterScriptFlush(t *testing.T) {
	srv := redistest.StartOne(t)
	s := newStore(t, srv)
	// No deadline on ctx, and the script cache empty (a restarted or
	// flushed Redis): EVALSHA fails with NOSCRIPT and EVAL must follow.
	if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(context.Background(), "doc", 3, []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
}

func TestStore_badInput(t *testing.T) {
	ctx := ctxT(t)
	srv := redistest.StartOne(t)
	s := newStore(t, srv)
	for name, err := range map[string]error{
		"empty key": s.Set(ctx, "", 1, nil, 0),
		"token 0":   s.Set(ctx, "k", 0, nil, 0),
		"neg TTL":   s.Set(ctx, "k", 1, nil, -time.Second),
		"µs TTL":    s.Set(ctx, "k", 1, nil, time.Microsecond),
	} {
		if !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if n, _ := srv.Do("DBSIZE"); n.(int64) != 0 {
		t.Errorf("bad input left %d keys", n)
	}
	if _, err := fence.NewStore(nil); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("nil pool: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Set(cancelled, "k", 1, nil, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v", err)
	}
}

func TestGuard_serialisesAndRefusesStale(t *testing.T) {
	var g fence.Guard
	var data []uint64
	var wg sync.WaitGroup
	for tok := uint64(1); tok <= 50; tok++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = g.Write("r", tok, func() error { data = append(data, tok); return nil })
		}()
	}
	wg.Wait()
	for i := 1; i < len(data); i++ {
		if data[i] < data[i-1] {
			t.Fatalf("write of token %d ran after token %d", data[i], data[i-1])
		}
	}
	if g.Highest("r") != data[len(data)-1] {
		t.Fatalf("Highest = %d, last write %d", g.Highest("r"), data[len(data)-1])
	}
	// Token 1 is below whatever was written last (50 goroutines ran).
	if err := g.Write("r", 1, func() error { t.Error("stale write ran"); return nil }); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale: %v", err)
	}
	failing := errors.New("disk full")
	if err := g.Write("other", 7, func() error { return failing }); !errors.Is(err, failing) || g.Highest("other") != 0 {
		t.Fatalf("a failed write must not raise the token: %v, %d", err, g.Highest("other"))
	}
}

// Kleppmann's scenario, end to end on real masters: holder 1 takes the
// lock and stalls past its validity (a GC pause); holder 2 takes the lock
// and writes; holder 1 wakes and writes. The fenced write of holder 1 is
// refused and holder 2's data survives.
func TestKleppmannPause_staleHolderIsRefused(t *testing.T) {
	for _, n := range []int{1, 5} {
		t.Run(map[int]string{1: "N=1", 5: "N=5"}[n], func(t *testing.T) {
			ctx := ctxT(t)
			masters := redistest.Start(t, n)
			pools := make([]pool.Pool, n)
			for i, m := range masters {
				pools[i] = m.Pool()
			}
			c1, err := redigo.New(pools, redlock.WithTimeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c1.Close()
			c2, err := redigo.New(pools, redlock.WithTimeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			data := redistest.StartOne(t) // the storage the locks protect
			store := newStore(t, data)

			l1, err := c1.Acquire(ctx, "file", redlock.WithTTL(time.Second), redlock.WithFencing())
			if err != nil {
				t.Fatal(err)
			}
			// Holder 1 pauses: its lock expires on the masters.
			time.Sleep(time.Until(l1.Until()) + 100*time.Millisecond) // the subject: the first lock's validity runs out

			l2, err := c2.Acquire(ctx, "file", redlock.WithTTL(10*time.Second), redlock.WithFencing())
			if err != nil {
				t.Fatal(err)
			}
			if l2.Fence() <= l1.Fence() {
				t.Fatalf("holder 2's token %d is not above holder 1's %d", l2.Fence(), l1.Fence())
			}
			if err := store.Set(ctx, "file", l2.Fence(), []byte("holder 2"), 0); err != nil {
				t.Fatal(err)
			}
			// Holder 1 wakes, unaware, and writes.
			err = store.Set(ctx, "file", l1.Fence(), []byte("holder 1"), 0)
			if !errors.Is(err, fence.ErrStale) {
				t.Fatalf("holder 1's stale write: err = %v, want ErrStale", err)
			}
			if v, _, _ := store.Get(ctx, "file"); string(v) != "holder 2" {
				t.Fatalf("data = %q, want holder 2's", v)
			}
			if err := l1.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) && !errors.Is(err, redlock.ErrLockLost) {
				t.Logf("holder 1's release: %v", err)
			}
			if err := l2.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestStore_readTurnsAwayOlderHoldersOnAPool(t *testing.T) {
	srv := redistest.StartOne(t)
	fencetest.ReadTurnsAwayOlderHolders(ctxT(t), t, newStore(t, srv), "counter")
}
