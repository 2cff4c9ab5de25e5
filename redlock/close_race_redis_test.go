package redlock_test

// Close racing the client's other calls: Observe (read and unread), Leader,
// Inspect, Campaign, a waiting Acquire and TryAcquire/Release, from many
// goroutines, with Close itself called twice at once and the callers' ctx
// cancelled at the same moment.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/observe"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// raceResult is what the racing callers saw.
type raceResult struct {
	mu       sync.Mutex
	observed []election.Leader // every Leader an Observe channel sent
	read     []election.Leader // every Leader a successful Leader call returned
	errs     []error           // unexpected errors (neither ErrClosed nor ctx's)
	unread   []<-chan election.Leader
}

func (r *raceResult) add(f func(r *raceResult)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

// lateObserver counts the answers and master states reported after
// closed was set: none may come once Close returned (the round legs that
// report them are the client's goroutines, which Close waits for).
type lateObserver struct {
	observe.NopObserver
	closed atomic.Bool
	late   atomic.Int64
}

func (o *lateObserver) OnMasterAnswer(context.Context, observe.MasterAnswer) {
	if o.closed.Load() {
		o.late.Add(1)
	}
}

func (o *lateObserver) OnMasterState(context.Context, observe.MasterStateEvent) {
	if o.closed.Load() {
		o.late.Add(1)
	}
}

// expectedEnd reports whether err is how a call may end at Close or at
// the end of its ctx.
func expectedEnd(err error) bool {
	return err == nil || errors.Is(err, redlock.ErrClosed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, election.ErrNoLeader) || errors.Is(err, redlock.ErrNotAcquired)
}

// A client closed (twice, concurrently) while 24 goroutines call every
// election and lock method on it, and while their ctx is cancelled (every
// other round): both Closes return within a few per-master timeouts, every
// call returns, every Observe channel (also those nobody reads) is closed
// when Close returns, no goroutine is left, and no Observe or Leader of
// the closed client names the leader another client elects after Close
// returned; its Observer gets no report of a master after Close returned.
// Six rounds on each path, three masters.
func TestClient_closeRacingEveryCallEndsThemAndNamesNoLaterLeader(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ignore := goleak.IgnoreCurrent()
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		cand, err := redigo.New(rs.pools, testOptions(path, nil)...)
		if err != nil {
			t.Fatal(err)
		}
		const key, busy = "race-leader", "race-busy"
		ce := electionOf(t, cand, key, 2*time.Second)
		held, err := cand.Acquire(ctx, busy, redlock.WithTTL(60*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		lead, err := ce.Campaign(ctx, "before-close-0")
		if err != nil {
			t.Fatal(err)
		}
		const rounds, callers = 6, 24
		var maxClose time.Duration
		for round := 0; round < rounds; round++ {
			obs := &lateObserver{}
			watcher, err := redigo.New(rs.pools, testOptions(path, []redlock.Option{redlock.WithObserver(obs)})...)
			if err != nil {
				t.Fatal(err)
			}
			we := electionOf(t, watcher, key, 2*time.Second)
			cctx, ccancel := context.WithCancel(ctx)
			res := &raceResult{}
			var wg sync.WaitGroup
			started := make(chan struct{}, callers)
			for i := 0; i < callers; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					raceCaller(cctx, i, watcher, we, busy, res, started)
				}(i)
			}
			for i := 0; i < callers; i++ {
				<-started
			}
			// Let the observers see the current leader first.
			waitObserved(t, res, lead.Term())

			var cw sync.WaitGroup
			closeTook := make([]time.Duration, 2)
			closeErr := make([]error, 2)
			gate := make(chan struct{})
			for j := 0; j < 2; j++ {
				cw.Add(1)
				go func(j int) {
					defer cw.Done()
					<-gate
					t0 := time.Now()
					closeErr[j] = watcher.Close()
					closeTook[j] = time.Since(t0)
				}(j)
			}
			if round%2 == 1 {
				cw.Add(1)
				go func() {
					defer cw.Done()
					<-gate
					ccancel()
				}()
			}
			close(gate)
			cw.Wait()
			obs.closed.Store(true)
			for j := range closeErr {
				if closeErr[j] != nil {
					t.Errorf("round %d: Close %d: %v", round, j, closeErr[j])
				}
				if closeTook[j] > maxClose {
					maxClose = closeTook[j]
				}
			}
			// Every Observe channel closes soon after Close returned (its
			// goroutine ends when Done is closed), sending no leader but
			// those elected before: at most the one Close found.
			var unread []<-chan election.Leader
			res.add(func(r *raceResult) { unread = append(unread, r.unread...) })
			bound := time.NewTimer(5 * time.Second)
			for k, ch := range unread {
			drain:
				for {
					select {
					case ld, ok := <-ch:
						if !ok {
							break drain
						}
						if ld.Term > lead.Term() {
							t.Errorf("round %d: unread Observe %d sent %+v after Close returned", round, k, ld)
						}
					case <-bound.C:
						t.Fatalf("round %d: unread Observe %d still open 5s after Close returned", round, k)
					}
				}
			}
			bound.Stop()

			// A leader elected after Close returned.
			if err := lead.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if lead, err = ce.Campaign(ctx, fmt.Sprintf("after-close-%d", round)); err != nil {
				t.Fatal(err)
			}
			after := lead.Term()
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("round %d: callers still running 20s after Close", round)
			}
			ccancel()
			if n := obs.late.Load(); n != 0 {
				t.Errorf("round %d: the observer got %d reports after Close returned", round, n)
			}
			res.add(func(r *raceResult) {
				for _, ld := range r.observed {
					if ld.Term >= after {
						t.Errorf("round %d: Observe of the closed client sent %+v, elected after Close (term %d)", round, ld, after)
					}
				}
				for _, ld := range r.read {
					if ld.Term >= after {
						t.Errorf("round %d: Leader of the closed client returned %+v, elected after Close (term %d)", round, ld, after)
					}
				}
				for _, err := range r.errs {
					t.Errorf("round %d: %v", round, err)
				}
				t.Logf("round %d: %d observed, %d leader reads, Close took %v and %v", round, len(r.observed), len(r.read), closeTook[0], closeTook[1])
			})
		}
		// Close bound: two per-master timeouts and slack for a busy machine.
		if limit := 2*realTimeout + 2*time.Second; maxClose > limit {
			t.Errorf("slowest Close took %v, want at most %v", maxClose, limit)
		}
		if err := lead.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cand.Close(); err != nil {
			t.Fatal(err)
		}
		goleak.VerifyNone(t, ignore)
	})
}

// waitObserved waits until some Observe sent term.
func waitObserved(t *testing.T, res *raceResult, term uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !redistest.WaitFor(ctx, func() bool {
		res.mu.Lock()
		defer res.mu.Unlock()
		for _, ld := range res.observed {
			if ld.Term == term {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no Observe sent term %d", term)
	}
}

// raceCaller runs one kind of call (by i) on c until c closes.
func raceCaller(ctx context.Context, i int, c *redlock.Client, e *election.Election, busy string, res *raceResult, started chan<- struct{}) {
	closed := func() bool {
		select {
		case <-c.Done():
			return true
		default:
			return false
		}
	}
	bad := func(what string, err error) {
		if !expectedEnd(err) {
			res.add(func(r *raceResult) { r.errs = append(r.errs, fmt.Errorf("%s: %w", what, err)) })
		}
	}
	switch i % 8 {
	case 0: // an Observe read to its end
		ch := e.Observe(ctx)
		started <- struct{}{}
		for ld := range ch {
			res.add(func(r *raceResult) { r.observed = append(r.observed, ld) })
		}
	case 1: // an Observe nobody reads
		ch := e.Observe(context.Background())
		res.add(func(r *raceResult) { r.unread = append(r.unread, ch) })
		started <- struct{}{}
	case 2: // Leader, again and again
		started <- struct{}{}
		for !closed() && ctx.Err() == nil {
			ld, err := e.Leader(ctx)
			if err == nil {
				res.add(func(r *raceResult) { r.read = append(r.read, ld) })
			}
			bad("Leader", err)
		}
		// After Close every Leader fails. (The loop may have ended for
		// ctx with Close still under way: only a client closed before
		// the call is asked.)
		if closed() {
			if _, err := e.Leader(context.Background()); !errors.Is(err, redlock.ErrClosed) {
				res.add(func(r *raceResult) { r.errs = append(r.errs, fmt.Errorf("Leader after Close: %v", err)) })
			}
		}
	case 3: // Inspect, again and again
		started <- struct{}{}
		for !closed() && ctx.Err() == nil {
			_, err := c.Inspect(ctx, "race-leader")
			bad("Inspect", err)
		}
		if _, err := c.Inspect(context.Background(), "race-leader"); closed() && !errors.Is(err, redlock.ErrClosed) {
			res.add(func(r *raceResult) { r.errs = append(r.errs, fmt.Errorf("Inspect after Close: %v", err)) })
		}
	case 4: // a Campaign that waits for the leader to go
		started <- struct{}{}
		l, err := e.Campaign(ctx, "watcher")
		if err == nil {
			res.add(func(r *raceResult) {
				r.errs = append(r.errs, fmt.Errorf("Campaign of the closed client won term %d", l.Term()))
			})
			l.Resign(context.Background())
		}
		bad("Campaign", err)
	case 5: // an Acquire that waits for a held key
		started <- struct{}{}
		l, err := c.Acquire(ctx, busy)
		if err == nil {
			res.add(func(r *raceResult) { r.errs = append(r.errs, errors.New("Acquire of a held key succeeded")) })
			l.Release(context.Background())
		}
		bad("Acquire", err)
	case 6: // TryAcquire and Release of its own key, again and again
		started <- struct{}{}
		for !closed() && ctx.Err() == nil {
			l, err := c.TryAcquire(ctx, fmt.Sprintf("race-own-%d", i), redlock.WithTTL(3*time.Second))
			bad("TryAcquire", err)
			if err == nil {
				bad("Release", l.Release(ctx))
			}
		}
	case 7: // Observe started again and again (each time at Close or ctx's end)
		started <- struct{}{}
		for !closed() && ctx.Err() == nil {
			for ld := range e.Observe(ctx) { // ends at Close or ctx
				res.add(func(r *raceResult) { r.observed = append(r.observed, ld) })
			}
		}
	}
}
