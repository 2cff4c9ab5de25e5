package goredis

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
)

// Issue 18 through go-redis: a reader calls Election.Leader again and
// again while candidates hand over many times, on one master and on five,
// with the reader's clients on RESP3 (go-redis's default) and RESP2.
// Every (value, term) it reads is a leader's real pair (each value
// campaigns once) and no term it reads is lower than one it read before:
// Leader reads the holder's token, its recorded term and its value in one
// script step per master, which the go-redis Inspector runs as it is.
func TestAttack18_LeaderDuringHandOver(t *testing.T) {
	for _, n := range []int{1, 5} {
		for _, proto := range []int{3, 2} {
			t.Run(fmt.Sprintf("N=%d/RESP%d", n, proto), func(t *testing.T) {
				ms := startMasters(t, n)
				ctx := ctxFor(t)
				readers := make([]redis.UniversalClient, n)
				for i, s := range ms.servers {
					c := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: proto})
					t.Cleanup(func() { c.Close() })
					readers[i] = c
				}
				rc, err := New(readers, redlock.WithTimeout(lockTimeout))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { rc.Close() })
				reader, err := rc.NewElection("ho")
				if err != nil {
					t.Fatal(err)
				}

				var mu sync.Mutex
				terms := map[string]uint64{}
				type read struct {
					v string
					t uint64
				}
				var reads []read
				rctx, stop := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() {
					defer close(done)
					for rctx.Err() == nil {
						if ld, err := reader.Leader(rctx); err == nil {
							reads = append(reads, read{ld.Value, ld.Term})
						}
					}
				}()
				var wg sync.WaitGroup
				for w := range 3 {
					e, err := ms.lockClient(t).NewElection("ho", redlock.WithTTL(2*time.Second))
					if err != nil {
						t.Fatal(err)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range 12 {
							v := fmt.Sprintf("w%d-%d", w, i)
							ld, err := e.Campaign(ctx, v)
							if err != nil {
								t.Error(err)
								return
							}
							mu.Lock()
							terms[v] = ld.Term()
							mu.Unlock()
							time.Sleep(5 * time.Millisecond)
							if err := ld.Resign(ctx); err != nil {
								t.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				stop()
				<-done
				var last uint64
				bad := 0
				for _, r := range reads {
					if want := terms[r.v]; r.t != want {
						bad++
						t.Errorf("Leader read %q with term %d; its term is %d", r.v, r.t, want)
					}
					if r.t < last {
						t.Errorf("Leader read term %d after %d", r.t, last)
					}
					last = max(last, r.t)
				}
				t.Logf("%d reads, %d wrong pairs", len(reads), bad)
				if len(reads) == 0 {
					t.Error("Leader never found a leader")
				}
			})
		}
	}
}
