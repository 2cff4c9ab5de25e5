package redlock_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// durMetrics reports the p50 and the maximum of ds, in ms, as name-p50-ms
// and name-max-ms.
func durMetrics(b *testing.B, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/1e6, name+"-p50-ms")
	b.ReportMetric(float64(ds[len(ds)-1])/1e6, name+"-max-ms")
}

// BenchmarkFairHandoffToHead: fair waiters X in client D, then B and E in
// client C, on one master; an op is one round of the three. It reports
// the hand-over from X's release to B's acquisition (B heads the queue
// then, after losing the previous release to X), and, for comparison,
// from the holder's release to X's acquisition when X waits alone in D.
func BenchmarkFairHandoffToHead(b *testing.B) {
	servers := redistest.Start(b, 1)
	newClient := func() *redlock.Client {
		c, err := redigo.NewFromAddrs([]string{servers[0].Addr()}, redlock.WithTimeout(realTimeout))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	h, d, c := newClient(), newClient(), newClient()
	ctx := context.Background()
	fair := []redlock.LockOption{redlock.WithFair(), redlock.WithWait(time.Minute)}
	queued := func(key string, n int) {
		redistest.Eventually(b, 10*time.Second, "queued", func() bool {
			got, err := redis.Int(servers[0].Do("ZCARD", "{"+key+"}:queue"))
			return err == nil && got == n
		})
	}
	acquire := func(cl *redlock.Client, key string) <-chan *redlock.Lock {
		got := make(chan *redlock.Lock, 1)
		go func() {
			l, err := cl.Acquire(ctx, key, fair...)
			if err != nil {
				b.Error(err)
			}
			got <- l
		}()
		return got
	}
	release := func(l *redlock.Lock) time.Time {
		if l == nil {
			b.FailNow()
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Now()
	}
	var head, lone []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := fmt.Sprintf("bench:fair:%d", i)
		held, err := h.Acquire(ctx, key, fair...)
		if err != nil {
			b.Fatal(err)
		}
		x := acquire(d, key)
		queued(key, 2)
		bw := acquire(c, key)
		queued(key, 3)
		ew := acquire(c, key)
		queued(key, 4)
		release(held)
		lx := <-x
		time.Sleep(time.Millisecond) // the subject: X holds, B's woken attempt is refused
		at := release(lx)
		lb := <-bw
		head = append(head, time.Since(at))
		release(lb)
		release(<-ew)

		// The same hand-over to a lone waiter.
		held, err = h.Acquire(ctx, key, fair...)
		if err != nil {
			b.Fatal(err)
		}
		x = acquire(d, key)
		queued(key, 2)
		time.Sleep(time.Millisecond) // the subject: the holder holds a moment with X queued, as above
		at = release(held)
		lx = <-x
		lone = append(lone, time.Since(at))
		release(lx)
	}
	b.StopTimer()
	durMetrics(b, "head", head)
	durMetrics(b, "lone", lone)
}

// BenchmarkHandoffSingleMaster: 8 clients (as 8 processes) on one key,
// N=1, each looping Acquire + hold + Release, with no hold and with a
// 1 ms one; an op is one cycle of any client. It reports the p50 and the
// longest wait of an Acquire: a client Redis tells first would win race
// after race without the age-weighted delay before a woken attempt, and
// the longest wait shows it.
func BenchmarkHandoffSingleMaster(b *testing.B) {
	for _, hold := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("hold=%v", hold), func(b *testing.B) { handoffSingleMaster(b, hold) })
	}
}

func handoffSingleMaster(b *testing.B, hold time.Duration) {
	var all []time.Duration
	for _, w := range handoffWaits(b, 1, 8, "bench:handoff1", hold) {
		all = append(all, w...)
	}
	durMetrics(b, "wait", all)
}
