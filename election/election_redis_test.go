package election_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Three candidates on three clients: one leads at a time; Leader, read by
// a fourth client, names it and its term; Resign hands over at once (well
// within the TTL: the waiting candidates are woken); every term is higher
// than the last; an observer sees every leader in order.
func TestElection_CampaignResignLeaderObserve(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		for _, n := range []int{1, 5} {
			t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
				rs := startReal(t, n)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				const ttl = 2 * time.Second
				watcher := newElection(t, rs.client(t, path), "leader", election.WithTTL(ttl))
				if _, err := watcher.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
					t.Fatalf("Leader before any campaign: %v", err)
				}
				obsCtx, stopObs := context.WithCancel(ctx)
				seen := watcher.Observe(obsCtx)

				won := make(chan *election.Leadership, 3)
				for i := range 3 {
					e := newElection(t, rs.client(t, path), "leader", election.WithTTL(ttl))
					go func() {
						ld, err := e.Campaign(ctx, fmt.Sprintf("candidate-%d", i))
						if err != nil {
							t.Error(err)
							won <- nil
							return
						}
						won <- ld
					}()
				}
				var terms []uint64
				var values []string
				var lastTerm uint64
				resigned := time.Time{}
				for range 3 {
					ld := <-won
					if ld == nil {
						t.FailNow()
					}
					if !resigned.IsZero() {
						if d := time.Since(resigned); d > ttl/2 {
							t.Errorf("hand-over took %v, not at once (TTL %v)", d, ttl)
						}
					}
					if ld.Term() <= lastTerm {
						t.Fatalf("term %d after %d", ld.Term(), lastTerm)
					}
					lastTerm = ld.Term()
					terms, values = append(terms, ld.Term()), append(values, ld.Value())
					// Only one leads: nobody else got in meanwhile.
					select {
					case other := <-won:
						t.Fatalf("two leaders: %q and %q", ld.Value(), other.Value())
					default:
					}
					eventually(t, "Leader does not name the leader", func() bool {
						got, err := watcher.Leader(ctx)
						return err == nil && got.Value == ld.Value() && got.Term == ld.Term() && got.TTL > 0
					})
					time.Sleep(3 * ttl / 10) // the subject: a leadership as long as several of the observer's readings (TTL/10 apart), each of which it must catch
					resigned = time.Now()
					if err := ld.Resign(ctx); err != nil {
						t.Fatal(err)
					}
					select {
					case <-ld.Lost():
					default:
						t.Fatal("Lost not closed after Resign")
					}
				}
				var observed []election.Leader
				for len(observed) < 3 {
					select {
					case o := <-seen:
						observed = append(observed, o)
					case <-time.After(5 * time.Second):
						t.Fatalf("observed %+v, want terms %v", observed, terms)
					}
				}
				for i, o := range observed {
					if o.Term != terms[i] || o.Value != values[i] {
						t.Fatalf("observed %+v, want terms %v values %q", observed, terms, values)
					}
				}
				stopObs()
				for range seen { // closed once ctx ends
				}
			})
		}
	})
}

// A leader whose process freezes (here: all of its traffic held, as a
// SIGSTOP would) is replaced once its key expires, within the TTL plus a
// fallback poll, by a candidate with a higher term; when it wakes up and
// writes with its old term, the store refuses it. Meanwhile a nemesis
// pauses a minority of the masters, and another kills one and restarts it
// (with its data, AOF); at no moment do two candidates hold valid
// leaderships.
func TestElection_FrozenLeaderAndNemesis(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, path connPath) {
		for _, n := range []int{1, 5} {
			t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
				frozenLeaderAndNemesis(t, path, n)
			})
		}
	})
}

func frozenLeaderAndNemesis(t *testing.T, path connPath, n int) {
	rs := startReal(t, n, redistest.WithAOF())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ttl = 1500 * time.Millisecond

	// The first leader reaches every master through a proxy that can
	// freeze it.
	var frozen atomic.Bool
	thaw := make(chan struct{})
	var addrs []string
	for _, s := range rs.servers {
		p := hostile.NewProxy(t, s.Addr(), func(c *hostile.Conn, cmd []string) hostile.Verdict {
			if frozen.Load() {
				select {
				case <-thaw:
				case <-c.Quit():
				}
				return hostile.HangUp
			}
			return hostile.Forward
		})
		addrs = append(addrs, p.Addr())
	}
	fc := addrClient(t, path, addrs)
	defer close(thaw)
	var guard fence.Guard
	write := func(term uint64) error { return guard.Write("data", term, func() error { return nil }) }

	first, err := newElection(t, fc, "e", election.WithTTL(ttl)).Campaign(ctx, "frozen")
	if err != nil {
		t.Fatal(err)
	}
	if err := write(first.Term()); err != nil {
		t.Fatal(err)
	}

	// Every valid leadership, to check that no two overlap.
	var mu sync.Mutex
	valid := map[*election.Leadership]string{}
	checkAlone := func(ld *election.Leadership) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		for other, v := range valid {
			if other != ld && now.Before(other.Lock().Until()) && other.Err() == nil {
				t.Errorf("%q elected for term %d while %q (term %d) is valid until %v",
					ld.Value(), ld.Term(), v, other.Term(), other.Lock().Until())
			}
		}
		valid[ld] = ld.Value()
	}
	checkAlone(first)

	// The nemesis: minority pauses and a kill with restart, while the
	// candidates take turns.
	nemCtx, stopNem := context.WithCancel(ctx)
	var nemesis sync.WaitGroup
	if n > 1 {
		nemesis.Add(1)
		go func() {
			defer nemesis.Done()
			for round := 0; nemCtx.Err() == nil; round++ {
				s := rs.servers[rand.N(n)]
				if round%4 == 3 {
					_ = s.Restart()
				} else {
					_ = s.Pause()
					select {
					case <-time.After(time.Duration(100+rand.N(300)) * time.Millisecond):
					case <-nemCtx.Done():
					}
					_ = s.Resume()
				}
				select {
				case <-time.After(200 * time.Millisecond):
				case <-nemCtx.Done():
				}
			}
		}()
	}

	frozenAt := time.Now()
	frozen.Store(true)
	var terms atomic.Uint64
	terms.Store(first.Term())
	deadline := time.Now().Add(8 * time.Second)
	var elected atomic.Int32
	var replaced atomic.Int64 // how long after the freeze the first successor came
	var wg sync.WaitGroup
	for i := range 3 {
		e := newElection(t, rs.client(t, path), "e", election.WithTTL(ttl))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				cctx, ccancel := context.WithDeadline(ctx, deadline)
				ld, err := e.Campaign(cctx, fmt.Sprintf("candidate-%d", i))
				ccancel()
				if err != nil {
					return
				}
				replaced.CompareAndSwap(0, int64(time.Since(frozenAt)))
				checkAlone(ld)
				elected.Add(1)
				if ld.Term() <= first.Term() {
					t.Errorf("term %d not above the frozen leader's %d", ld.Term(), first.Term())
				}
				for {
					old := terms.Load()
					if ld.Term() <= old || terms.CompareAndSwap(old, ld.Term()) {
						break
					}
				}
				if err := write(ld.Term()); err != nil && !errors.Is(err, fence.ErrStale) {
					t.Error(err)
				}
				select {
				case <-time.After(time.Duration(50+rand.N(200)) * time.Millisecond):
				case <-ld.Lost():
				}
				mu.Lock()
				delete(valid, ld)
				mu.Unlock()
				_ = ld.Resign(context.Background())
			}
		}()
	}
	// The candidates until the deadline; then the nemesis. (One WaitGroup
	// for both waited for the nemesis, which stops only after the wait,
	// until ctx ended: 60 s per N=5 run instead of 8.)
	wg.Wait()
	stopNem()
	nemesis.Wait()
	for _, s := range rs.servers {
		_ = s.Resume()
	}
	if elected.Load() < 3 {
		t.Fatalf("only %d elections in 8 s", elected.Load())
	}
	// Replaced within the TTL, plus a fallback poll (at most half the
	// TTL) and slack for a loaded machine.
	if d := time.Duration(replaced.Load()); d > 2*ttl+time.Second {
		t.Errorf("the frozen leader was replaced after %v (TTL %v)", d, ttl)
	}
	// The frozen leader wakes up, believes itself leader, and writes.
	err = write(first.Term())
	var stale *fence.StaleError
	if !errors.As(err, &stale) || stale.Highest != terms.Load() {
		t.Fatalf("the deposed leader's write: %v (highest term %d)", err, terms.Load())
	}
}

// An election costs one goroutine per Observe and nothing per waiting
// candidate beyond the caller's own: many candidates and observers on one
// client add no more than that, and none outlives its ctx (goleak).
func TestElection_goroutinesBounded(t *testing.T) {
	rs := startReal(t, 3)
	c := rs.client(t, pipelinedPath)
	e := newElection(t, c, "bounded", election.WithTTL(2*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ld, err := e.Campaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(context.Background())
	// One candidate and one observer, to start what the client starts
	// once (subscribers, connections).
	start := func(n int) {
		for range n {
			go func() { _, _ = e.Campaign(ctx, "waiting") }()
			e.Observe(ctx)
		}
	}
	// The fewest goroutines seen over a second: an observer's reading and
	// a candidate's attempt start short-lived ones, which a loaded machine
	// may catch in any one count.
	settled := func() int {
		fewest := runtime.NumGoroutine()
		for range 20 {
			time.Sleep(50 * time.Millisecond) // the subject: the samples spread over a second
			fewest = min(fewest, runtime.NumGoroutine())
		}
		return fewest
	}
	// waiting waits until n candidates wait between their attempts (in
	// redlock's pause) and the release notices are read from every master
	// (a subscription's reader each): what the client starts for waiters
	// runs by then.
	waiting := func(n int) {
		t.Helper()
		redistest.Eventually(t, 10*time.Second, fmt.Sprintf("%d candidates waiting, a subscription read on each master", n), func() bool {
			return redistest.Goroutines("", "TestElection_goroutinesBounded.", "election.(*Election).Campaign(", "redlock.(*Client).pause(") >= n &&
				redistest.Goroutines("", "redigot.(*redigoSub).read(") >= len(rs.servers)
		})
	}
	start(1)
	waiting(1)
	base := settled()
	const more = 20
	start(more)
	// Most of them: one may be in an attempt at any moment.
	waiting(more)
	if grown := settled() - base; grown > 2*more+4 {
		t.Fatalf("%d candidates and %d observers more: %d goroutines more", more, more, grown)
	}
	cancel()
}
