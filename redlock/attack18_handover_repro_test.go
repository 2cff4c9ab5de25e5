//go:build attack18repro

// A known-failing reproduction (attack18), kept out of the normal suite:
// Election.Leader pairs a value with a term that is not that leader's.
// Run it with: go test -race -count=1 -tags attack18repro -run TestAttack18_LeaderDuringHandOver ./redlock/
// It passes once Leader reads a holder's committed term and metadata
// atomically with its token.

package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// A third client reads Leader again and again while candidates hand over
// many times: every (value, term) it reads is a leader's real pair (each
// value campaigns once), and no term it reads is lower than one it read
// before.
func TestAttack18_LeaderDuringHandOver(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 5)
		ctx := ctxT(t)
		reader := newElection(t, rs.client(t, path), "ho")
		var mu sync.Mutex
		terms := map[string]uint64{} // value -> its Leadership's term
		rctx, stop := context.WithCancel(ctx)
		type read struct {
			v string
			t uint64
		}
		var reads []read
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
			e := newElection(t, rs.client(t, path), "ho", redlock.WithTTL(2*time.Second))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 15 {
					v := string(rune('a'+w)) + "-" + string(rune('a'+i))
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
	})
}
