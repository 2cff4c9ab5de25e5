package redlock_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/redlock"
)

// Resource use stays bounded under abuse: memory and goroutines do not
// grow with the number of distinct keys locked, and waiters leave no
// subscription behind.

func heapAndGoroutines() (uint64, int) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, runtime.NumGoroutine()
}

// The heap and the goroutines stay flat over 20k more distinct keys than
// a warm-up's: a leak of as little as 50 bytes a key shows (1 MB), and
// the run takes a fifth of the 100k keys it once used. The per-master
// timeout is long: the subject is memory, not speed, and a machine busy
// with other programs delays replies past the default 500 ms.
func TestBounds_memoryFlatOverDistinctKeys(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 1)
		c := rs.clientKeeping(t, 64, path, redlock.WithTimeout(3*time.Second)) // one connection per goroutine
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var next atomic.Int64
		cycle := func(upTo int64) {
			var wg sync.WaitGroup
			for g := 0; g < 64; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > upTo {
							return
						}
						l, err := c.TryAcquire(ctx, fmt.Sprintf("distinct:%d", i))
						if err != nil {
							t.Error(err)
							return
						}
						if err := l.Release(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		}
		cycle(2_000) // warm up: connections, pools, scripts
		heap0, gor0 := heapAndGoroutines()
		cycle(22_000)
		heap1, gor1 := heapAndGoroutines()
		t.Logf("after 2k keys: heap %d kB, %d goroutines; after 22k: heap %d kB, %d goroutines",
			heap0/1024, gor0, heap1/1024, gor1)
		if heap1 > heap0+1<<20 {
			t.Errorf("the heap grew by %d kB over 20k more distinct keys", (heap1-heap0)/1024)
		}
		if gor1 > gor0+2 {
			t.Errorf("goroutines grew from %d to %d", gor0, gor1)
		}
		if r, w, m := c.Sizes(); r != 0 || w != 0 || m > 1 {
			t.Errorf("bookkeeping left: %d releases tracked, %d keys with waiters, %d connections", r, w, m)
		}
		if n, _ := redis.Int(rs.servers[0].Do("DBSIZE")); n != 0 {
			t.Errorf("%d keys left on the master", n)
		}
	})
}

func TestWake_waitersLeaveNothingBehind(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		holder := rs.client(t, path)
		c := rs.client(t, path)
		ctx := ctxT(t)
		const keys = 300
		var held []*redlock.Lock
		for i := 0; i < keys; i++ {
			l, err := holder.Acquire(ctx, fmt.Sprintf("w:%d", i), redlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}
		_, gor0 := heapAndGoroutines()
		// Every key gets a waiter, which gives up when waitCtx ends.
		waitCtx, stopWaiting := context.WithCancel(ctx)
		defer stopWaiting()
		var wg sync.WaitGroup
		for i := 0; i < keys; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A long backoff: after its first attempt a waiter sleeps
				// until a release (or waitCtx) wakes it.
				l, err := c.Acquire(waitCtx, fmt.Sprintf("w:%d", i), redlock.WithWait(time.Hour), redlock.WithBackoff(time.Minute, time.Minute))
				if waitCtx.Err() == nil {
					t.Errorf("waiter %d returned early: lock %v, err %v", i, l != nil, err)
				}
			}()
		}
		waitUntil(t, "every waiter subscribed", func() bool {
			n, _ := redis.Int(rs.servers[0].Do("PUBSUB", "NUMPAT"))
			chans, _ := redis.Strings(rs.servers[0].Do("PUBSUB", "CHANNELS", "quorumlock:released:w:*"))
			return n == 0 && len(chans) == keys
		})
		// The attempts' own work (the pooled path's per-master workers)
		// ends; then only what waiting itself costs is left.
		var gorWaiting int
		waitUntil(t, "the goroutine count settles", func() bool {
			_, a := heapAndGoroutines()
			time.Sleep(50 * time.Millisecond) // the subject: a spell in which the count must not change
			_, b := heapAndGoroutines()
			gorWaiting = b
			return a == b
		})
		stopWaiting()
		wg.Wait()
		// The keys' channels linger a while after their last waiter, at
		// most MaxLinger of them.
		if n := redlock.Lingering(c); n > redlock.MaxLinger {
			t.Errorf("%d keys linger, want at most %d", n, redlock.MaxLinger)
		}
		// One subscriber connection per master, whatever the number of keys:
		// the goroutines while waiting are the waiters' own plus a few per
		// master (the client's pipelined connections and subscribers, two
		// goroutines each), nothing per key or per waiter.
		t.Logf("%d goroutines beyond the waiters' own", gorWaiting-gor0-keys)
		if extra := gorWaiting - gor0 - keys; extra > 10*len(rs.servers) {
			t.Errorf("%d goroutines beyond the waiters' own while %d keys were waited for", extra, keys)
		}
		waitUntil(t, "the subscriptions are gone", func() bool {
			chans, _ := redis.Strings(rs.servers[0].Do("PUBSUB", "CHANNELS", "quorumlock:released:w:*"))
			return len(chans) == 0
		})
		if _, w, _ := c.Sizes(); w != 0 || redlock.Lingering(c) != 0 {
			t.Errorf("%d keys still have waiters, %d linger", w, redlock.Lingering(c))
		}
		for _, l := range held {
			_ = l.Release(context.Background())
		}
	})
}
