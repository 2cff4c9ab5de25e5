// Package handover drives leadership hand-overs for the tests of
// election.Election.Leader in every module: candidates campaign again
// and again, each with values it uses once, and the term each value won
// is kept, so that the (value, term) pairs a reader was told can be
// checked against the leaders' real ones.
package handover

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/election"
)

// Terms maps each value that won an election to its Leadership's term.
// It is safe for concurrent use.
type Terms struct {
	mu sync.Mutex
	m  map[string]uint64
}

// Term returns the term value won, and whether it won.
func (ts *Terms) Term(value string) (uint64, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	term, ok := ts.m[value]
	return term, ok
}

// Len returns how many values won.
func (ts *Terms) Len() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.m)
}

func (ts *Terms) add(value string, term uint64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.m[value] = term
}

// Run makes each of candidates campaign rounds times in turn with the
// values "w<candidate>-<round>", each leadership held for hold and then
// resigned, and returns the terms won once every candidate is done (or
// stopped at its first error, reported with t.Error).
func Run(ctx context.Context, t testing.TB, candidates []*election.Election, rounds int, hold time.Duration) *Terms {
	terms := &Terms{m: map[string]uint64{}}
	var wg sync.WaitGroup
	for w, e := range candidates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				v := fmt.Sprintf("w%d-%d", w, i)
				ld, err := e.Campaign(ctx, v)
				if err != nil {
					t.Error(err)
					return
				}
				terms.add(v, ld.Term())
				time.Sleep(hold)
				if err := ld.Resign(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return terms
}

// Read is one leader a reader was told of.
type Read struct {
	Value string
	Term  uint64
}

// Check reports with t.Errorf every read that is not a leader's real
// (value, term) pair and, when ordered (reads by one client, in order),
// every term lower than one read before it. It returns how many pairs
// were wrong.
func Check(t testing.TB, reads []Read, terms *Terms, ordered bool) int {
	t.Helper()
	var last uint64
	bad := 0
	for _, r := range reads {
		if want, ok := terms.Term(r.Value); !ok || r.Term != want {
			bad++
			t.Errorf("Leader read %q with term %d; its term is %d", r.Value, r.Term, want)
		}
		if ordered && r.Term < last {
			t.Errorf("Leader read term %d after %d", r.Term, last)
		}
		last = max(last, r.Term)
	}
	return bad
}

// LeaderDuring calls reader.Leader again and again while candidates
// hand over rounds times each (Run, holding each leadership 5ms), then
// checks every leader read (Check, ordered) and that one was read at all.
func LeaderDuring(ctx context.Context, t testing.TB, reader *election.Election, candidates []*election.Election, rounds int) {
	t.Helper()
	var reads []Read
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for rctx.Err() == nil {
			if ld, err := reader.Leader(rctx); err == nil {
				reads = append(reads, Read{ld.Value, ld.Term})
			}
		}
	}()
	terms := Run(ctx, t, candidates, rounds, 5*time.Millisecond)
	stop()
	<-done
	bad := Check(t, reads, terms, true)
	t.Logf("%d reads, %d wrong pairs", len(reads), bad)
	if len(reads) == 0 {
		t.Error("Leader never found a leader")
	}
}
