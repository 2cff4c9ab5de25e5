package integration_test

// Suite 5: safety under a nemesis. Clients contend for one key on N=5
// masters (AOF always) while a nemesis pauses, kills and restarts, and
// partitions random minorities. Every lock's validity window is recorded on
// this process's monotonic clock; inside each lock, an unprotected
// read-sleep-write increments a counter on a separate Redis, and a fenced
// write (fence.Store) records the holder's token there. Now and then a
// holder plays Kleppmann's paused client: it sleeps past its lock's
// validity and then writes again with its old token.

import (
	"context"
	"errors"
	"flag"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/redlock"
)

var nemesisDuration = flag.Duration("nemesis", 30*time.Second,
	"how long the nemesis suite runs per backend (longer for a soak)")

type window struct {
	client     int
	fence      uint64
	start, end time.Time
}

// fencedWrite is one write through fence.Store.
type fencedWrite struct {
	client            int
	fence             uint64
	stale             bool // written after the lock's validity
	started, finished time.Time
	accepted          bool
}

func TestNemesis(t *testing.T) {
	cluster.ForEachBackend(t, func(t *testing.T, b cluster.Backend) {
		const n, clients = 5, 8
		c := cluster.Start(t, n, cluster.WithBackend(b), cluster.WithAOF())
		counterSrv := cluster.Start(t, 1, cluster.WithBackend(b)).Masters[0]
		k := key(t)
		_, err := counterSrv.Do("SET", "counter", 0)
		must(t, err)
		store, err := fence.NewStore(counterSrv.Pool())
		must(t, err)
		var writes []fencedWrite

		ctx, cancel := context.WithTimeout(context.Background(), *nemesisDuration)
		defer cancel()

		var (
			mu         sync.Mutex
			windows    []window
			acquired   atomic.Int64
			completed  atomic.Int64
			failures   atomic.Int64
			skipped    atomic.Int64
			overran    atomic.Int64
			faultCount = map[string]int{}
		)
		var wg sync.WaitGroup
		// Half the clients pipeline, half take the pooled path: one run
		// covers both paths, and their locks must exclude each other's.
		for id := 0; id < clients; id++ {
			client := newClient(t, connPaths[id%len(connPaths)], c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				counterConn := counterSrv.Pool()
				rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
				write := func(tok uint64, stale bool) {
					w := fencedWrite{client: id, fence: tok, stale: stale, started: time.Now()}
					err := store.Set(context.Background(), "fenced", tok, []byte(strconv.FormatUint(tok, 10)), 0)
					w.finished = time.Now()
					switch {
					case err == nil:
						w.accepted = true
					case !errors.Is(err, fence.ErrStale):
						t.Errorf("client %d: fenced write: %v", id, err)
						return
					}
					mu.Lock()
					writes = append(writes, w)
					mu.Unlock()
				}
				for ctx.Err() == nil {
					// One holder in eight will play the paused client, on
					// a shorter lock so it holds the others up less.
					stale, ttl := rng.IntN(8) == 0, 2*time.Second
					if stale {
						ttl = time.Second
					}
					l, err := client.Acquire(ctx, k, redlock.WithTTL(ttl), redlock.WithWait(10*time.Second), redlock.WithFencing())
					start := time.Now()
					if err != nil {
						if ctx.Err() == nil {
							failures.Add(1)
						}
						continue
					}
					acquired.Add(1)
					until := l.Until()
					end := until
					if time.Until(until) < 500*time.Millisecond {
						skipped.Add(1) // too little validity left to work safely
					} else if err := increment(counterConn); err != nil {
						t.Errorf("client %d: counter: %v", id, err)
					} else if write(l.Fence(), false); time.Now().After(until) {
						overran.Add(1)
					} else {
						completed.Add(1)
					}
					if rel := time.Now(); rel.Before(end) {
						end = rel
					}
					mu.Lock()
					windows = append(windows, window{client: id, fence: l.Fence(), start: start, end: end})
					mu.Unlock()
					if stale && ctx.Err() == nil {
						// Paused past the validity; wakes and writes.
						time.Sleep(time.Until(until) + 300*time.Millisecond)
						write(l.Fence(), true)
					}
					_ = l.Release(context.Background())
				}
			}()
		}

		// The nemesis: every few hundred ms, heal the last faults and
		// break a new random minority.
		kinds := []string{"pause", "kill/restart", "partition"}
		if b == cluster.Process {
			kinds = kinds[:2]
			t.Log("the process backend cannot partition: this run's nemesis pauses and kills/restarts only")
		}
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(200+rng.IntN(300)) * time.Millisecond):
			}
			if err := c.HealAll(); err != nil {
				t.Errorf("nemesis heal: %v", err)
			}
			if ctx.Err() != nil {
				break
			}
			victims := rng.Perm(n)[:1+rng.IntN((n-1)/2)]
			for _, v := range victims {
				kind := kinds[rng.IntN(len(kinds))]
				m := c.Masters[v]
				var err error
				switch kind {
				case "pause":
					err = m.Pause()
				case "kill/restart":
					err = m.Kill() // restarted by the next heal
				case "partition":
					err = m.Partition()
				}
				if err != nil {
					t.Errorf("nemesis %s %v: %v", kind, m, err)
				}
				faultCount[kind]++
			}
		}
		must(t, c.HealAll())
		wg.Wait()

		counter, err := redis.Int64(counterSrv.Do("GET", "counter"))
		must(t, err)
		t.Logf("%v on %s: %d acquisitions, %d critical sections, %d skipped for low validity, %d overran, %d acquire failures; faults injected: %v",
			*nemesisDuration, b, acquired.Load(), completed.Load(), skipped.Load(), overran.Load(), failures.Load(), faultCount)
		if acquired.Load() == 0 {
			t.Fatal("no lock was ever acquired")
		}
		if counter != completed.Load()+overran.Load() {
			t.Errorf("counter = %d, but %d critical sections ran: increments were lost to overlapping holders",
				counter, completed.Load()+overran.Load())
		}
		if overran.Load() > 0 {
			t.Errorf("%d critical sections ended after their lock's validity", overran.Load())
		}
		slices.SortFunc(windows, func(a, b window) int { return a.start.Compare(b.start) })
		for i := 1; i < len(windows); i++ {
			if prev, cur := windows[i-1], windows[i]; cur.start.Before(prev.end) {
				t.Errorf("validity windows overlap: client %d held [%v, %v], client %d from %v",
					prev.client, prev.start.Format("15:04:05.000000"), prev.end.Format("15:04:05.000000"),
					cur.client, cur.start.Format("15:04:05.000000"))
			}
			if prev, cur := windows[i-1], windows[i]; cur.fence <= prev.fence {
				t.Errorf("fencing tokens went backwards: client %d got %d, the next grant (client %d) %d",
					prev.client, prev.fence, cur.client, cur.fence)
			}
		}
		checkFencedWrites(t, writes)
	})
}

// checkFencedWrites checks what fencing promises: a write inside its lock's
// validity is never refused (no later holder exists yet), and no write is
// accepted after a write with a higher token had completed.
func checkFencedWrites(t *testing.T, writes []fencedWrite) {
	t.Helper()
	var stale, staleRefused int
	for _, w := range writes {
		if !w.stale && !w.accepted {
			t.Errorf("client %d's write with token %d, inside its lock's validity, was refused", w.client, w.fence)
		}
		if w.stale {
			stale++
			if !w.accepted {
				staleRefused++
			}
		}
		if !w.accepted {
			continue
		}
		for _, o := range writes {
			if o.accepted && o.fence > w.fence && o.finished.Before(w.started) {
				t.Errorf("client %d's write with token %d was accepted after client %d's write with token %d",
					w.client, w.fence, o.client, o.fence)
			}
		}
	}
	t.Logf("fenced writes: %d, of which %d by paused holders after their validity; %d of those refused", len(writes), stale, staleRefused)
	if stale > 0 && staleRefused == 0 {
		t.Errorf("no paused holder's write was refused: the stale-writer check did not bite")
	}
}

// increment is the unprotected read-sleep-write that only the lock keeps
// correct.
func increment(p interface {
	GetContext(context.Context) (redis.Conn, error)
}) error {
	conn, err := p.GetContext(context.Background())
	if err != nil {
		return err
	}
	defer conn.Close()
	v, err := redis.Int64(conn.Do("GET", "counter"))
	if err != nil && !errors.Is(err, redis.ErrNil) {
		return err
	}
	time.Sleep(2 * time.Millisecond)
	_, err = conn.Do("SET", "counter", strconv.FormatInt(v+1, 10))
	return err
}
