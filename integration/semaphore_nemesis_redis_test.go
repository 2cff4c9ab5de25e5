package integration_test

// The semaphore under the nemesis: 16 clients take permits of a semaphore
// of 3 on N=5 masters (AOF always) while masters are paused, killed and
// restarted, and their clocks drift and jump within the allowance. Every
// permit's window — from Acquire's return to its release or its Until(),
// whichever is first — is recorded on this process's monotonic clock: at
// no moment may more than 3 be open, nor two in one slot.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

var (
	semaphoreGrants = flag.Int("semaphore-grants", 200,
		"how many permits the semaphore nemesis grants before it stops (make nemesis-semaphore: 20000)")
	semaphoreMax = flag.Duration("semaphore-max", 30*time.Minute,
		"how long the semaphore nemesis may take to grant them (it then fails, saying how many it granted)")
)

// permitWindow is one permit's validity as its holder used it.
type permitWindow struct {
	slot, client int
	start, end   time.Time
}

// maxOpen returns the most windows open at one moment, and the overlaps of
// windows in one slot.
func maxOpen(ws []permitWindow) (most int, sameSlot []string) {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	bySlot := map[int][]permitWindow{}
	for _, w := range ws {
		if !w.end.After(w.start) {
			continue
		}
		edges = append(edges, edge{w.start, 1}, edge{w.end, -1})
		bySlot[w.slot] = append(bySlot[w.slot], w)
	}
	// Ends before starts at the same moment: touching windows do not overlap.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	open := 0
	for _, e := range edges {
		open += e.delta
		most = max(most, open)
	}
	for slot, list := range bySlot {
		slices.SortFunc(list, func(a, b permitWindow) int { return a.start.Compare(b.start) })
		for i := 1; i < len(list); i++ {
			if list[i].start.Before(list[i-1].end) {
				sameSlot = append(sameSlot, fmt.Sprintf("slot %d: client %d's permit from %v overlaps client %d's until %v by %v",
					slot, list[i].client, list[i].start.Format("15:04:05.000000"), list[i-1].client,
					list[i-1].end.Format("15:04:05.000000"), list[i-1].end.Sub(list[i].start)))
			}
		}
	}
	return most, sameSlot
}

// semaphoreRun is what runSemaphore counted.
type semaphoreRun struct {
	windows  []permitWindow
	grants   int64
	failures int64
	elapsed  time.Duration
	// busy is the permits held on average over the run (windows' total
	// length over the elapsed time).
	busy float64
}

// runSemaphore runs clients on a semaphore of k on c's masters until
// grants permits were granted or ctx ends, each holding its permit for
// hold, and returns the windows.
func runSemaphore(ctx context.Context, t testing.TB, c *cluster.Cluster, clients, k int, grants int64, hold time.Duration) *semaphoreRun {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	run := &semaphoreRun{}
	var mu sync.Mutex
	var granted, failed atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for id := 0; id < clients; id++ {
		client := newTBClient(t, connPaths[id%len(connPaths)], c)
		s, err := client.NewSemaphore("semaphore:"+t.Name(), k, redlock.WithTTL(2*time.Second), redlock.WithWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				p, err := s.Acquire(ctx)
				start := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
						if !errors.Is(err, redlock.ErrNotAcquired) {
							t.Errorf("client %d: %v", id, err)
							return
						}
					}
					continue
				}
				if granted.Add(1) >= grants {
					cancel()
				}
				time.Sleep(hold) // the subject: the work under the permit
				end := time.Now()
				if u := p.Until(); u.Before(end) {
					end = u
				}
				_ = p.Release(context.Background())
				mu.Lock()
				run.windows = append(run.windows, permitWindow{slot: p.Slot(), client: id, start: start, end: end})
				mu.Unlock()
			}
		}()
	}
	<-ctx.Done()
	stopped := time.Now()
	wg.Wait()
	run.elapsed = stopped.Sub(began)
	run.grants, run.failures = granted.Load(), failed.Load()
	var held time.Duration
	for _, w := range run.windows {
		end := w.end
		if end.After(stopped) {
			end = stopped
		}
		if end.After(w.start) {
			held += end.Sub(w.start)
		}
	}
	run.busy = held.Seconds() / run.elapsed.Seconds()
	return run
}

func TestSemaphoreNemesis_atMostKValidPermits(t *testing.T) {
	c := cluster.Start(t, 5, cluster.WithBackend(cluster.Process), cluster.WithAOF(), cluster.WithClockFaults())
	ctx, cancel := context.WithTimeout(context.Background(), *semaphoreMax)
	defer cancel()
	faults := map[string]int{}
	faultsCtx, stopFaults := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runFaults(faultsCtx, t, c, nemesisConfig{ttl: 2 * time.Second,
			kinds: []string{faultPause, faultKill, faultClockRate, faultClockBack, faultClockFwd}}, faults)
	}()
	run := runSemaphore(ctx, t, c, 16, 3, int64(*semaphoreGrants), time.Millisecond)
	stopFaults()
	<-done
	must(t, c.HealAll())
	most, sameSlot := maxOpen(run.windows)
	t.Logf("%d grants in %v (%.0f/s), %d acquisitions failed, faults %v; at most %d valid permits at once, %.2f held on average",
		run.grants, run.elapsed.Round(time.Millisecond), float64(run.grants)/run.elapsed.Seconds(), run.failures, faults, most, run.busy)
	if run.grants < int64(*semaphoreGrants) {
		t.Errorf("%d grants, want %d", run.grants, *semaphoreGrants)
	}
	if most > 3 {
		t.Errorf("%d valid permits at once, of a semaphore of 3", most)
	}
	for i, s := range sameSlot {
		if i == 5 {
			t.Errorf("... and %d more", len(sameSlot)-5)
			break
		}
		t.Error(s)
	}
}

// BenchmarkSemaphore_permitsBusy measures, with every master up and 16
// contenders each holding a permit for 50 ms, how many of the 3 permits are
// held on average ("permits-busy"; the target is at least 2.5: no permit
// idle while a waiter waits), beside a plain lock's share of time held by
// 16 contenders on a semaphore of 1 — one plain lock — ("lock-busy", of
// 1), on the same masters: the machine's load shows in both.
func BenchmarkSemaphore_permitsBusy(b *testing.B) {
	c := cluster.Start(b, 5, cluster.WithBackend(cluster.Process))
	const hold = 50 * time.Millisecond
	var sem, lock float64
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		sem += runSemaphore(ctx, b, c, 16, 3, 1<<62, hold).busy
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		lock += runSemaphore(ctx, b, c, 16, 1, 1<<62, hold).busy
		cancel()
	}
	b.ReportMetric(sem/float64(b.N), "permits-busy")
	b.ReportMetric(lock/float64(b.N), "lock-busy")
}

// newTBClient is newClient for a test or a benchmark.
func newTBClient(t testing.TB, path connPath, c *cluster.Cluster) *redlock.Client {
	t.Helper()
	client, err := redigo.New(c.Pools(), redlock.WithTimeout(timeout), redigo.WithPipelining(path.pipelined))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}
