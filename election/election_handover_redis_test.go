// Election.Leader must pair a value with that leader's own term during a
// hand-over, not a term read from the fencing counter before the new
// leader's commit in another round trip. Leader reads the token, the term recorded for it and its
// value in one script step per master.

package election_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/handover"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// A third client reads Leader again and again while candidates hand over
// many times: every (value, term) it reads is a leader's real pair (each
// value campaigns once), and no term it reads is lower than one it read
// before.
func TestLeader_readsRealPairsDuringHandOver(t *testing.T) {
	for _, n := range []int{1, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			forEachPath(t, func(t *testing.T, path connPath) { leaderDuringHandOver(t, path, n) })
		})
	}
}

func leaderDuringHandOver(t *testing.T, path connPath, n int) {
	rs := startReal(t, n)
	reader := newElection(t, rs.client(t, path), "ho")
	candidates := make([]*election.Election, 3)
	for i := range candidates {
		candidates[i] = newElection(t, rs.client(t, path), "ho", election.WithTTL(2*time.Second))
	}
	handover.LeaderDuring(ctxT(t), t, reader, candidates, 15)
}

// Leader while a minority master is frozen (SIGSTOP) and terms change
// under it, then thawed with what it held when it froze: every (value,
// term) read is a leader's real pair, terms never go back, Leader still
// finds leaders while the master is frozen, and every call returns within
// its ctx (with a generous allowance for a loaded machine).
func TestLeader_withFrozenMinorityMaster(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 5)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		frozen := rs.servers[4]
		t.Cleanup(func() { _ = frozen.Resume() })
		reader := newElection(t, rs.client(t, path), "fz")

		var mu sync.Mutex
		terms := map[string]uint64{} // value -> its Leadership's term
		won := func() int { mu.Lock(); defer mu.Unlock(); return len(terms) }
		cctx, stopCampaigns := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for w := range 3 {
			e := newElection(t, rs.client(t, path), "fz", election.WithTTL(2*time.Second))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; cctx.Err() == nil; i++ {
					v := fmt.Sprintf("w%d-%d", w, i)
					ld, err := e.Campaign(cctx, v)
					if err != nil {
						if cctx.Err() == nil {
							t.Error(err)
						}
						return
					}
					mu.Lock()
					terms[v] = ld.Term()
					mu.Unlock()
					time.Sleep(250 * time.Millisecond) // the subject: a hold long enough for a reader with a frozen master to see it
					if err := ld.Resign(ctx); err != nil {
						t.Logf("%s resign: %v", v, err) // a release not confirmed by the frozen master is no fault here
					}
				}
			}()
		}

		type read struct {
			v      string
			t      uint64
			frozen bool
		}
		var reads []read
		var isFrozen atomic.Bool
		var frozenReads atomic.Int32 // leaders read while the master was frozen
		var late, errs int
		rctx, stopReads := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; rctx.Err() == nil; i++ {
				// Alternate a bound below the per-master timeout with one above it.
				bound := 200 * time.Millisecond
				if i%2 == 1 {
					bound = 3 * time.Second
				}
				lctx, cancel := context.WithTimeout(rctx, bound)
				start := time.Now()
				ld, err := reader.Leader(lctx)
				took := time.Since(start)
				cancel()
				if took > bound+2*time.Second {
					late++
					t.Errorf("Leader took %v with a ctx of %v", took, bound)
				}
				if err != nil {
					if errs++; errs <= 5 {
						t.Logf("Leader (ctx %v, frozen %v): %v", bound, isFrozen.Load(), err)
					}
					continue
				}
				f := isFrozen.Load()
				if f {
					frozenReads.Add(1)
				}
				reads = append(reads, read{ld.Value, ld.Term, f})
			}
		}()
		defer func() { // also when a wait fails: no goroutine outlives the test
			stopCampaigns()
			stopReads()
			wg.Wait()
			<-done
		}()

		waitLong(t, "three leaders before the freeze", func() bool { return won() >= 3 })
		if err := frozen.Pause(); err != nil {
			t.Fatal(err)
		}
		isFrozen.Store(true)
		before := won()
		waitLong(t, "five leaders and three leaders read while a master is frozen", func() bool {
			return won() >= before+5 && frozenReads.Load() >= 3
		})
		isFrozen.Store(false)
		if err := frozen.Resume(); err != nil {
			t.Fatal(err)
		}
		before = won()
		waitLong(t, "three leaders after the thaw", func() bool { return won() >= before+3 })
		stopCampaigns()
		wg.Wait()
		stopReads()
		<-done

		var last uint64
		bad, whileFrozen := 0, 0
		for _, r := range reads {
			if want, ok := terms[r.v]; !ok || r.t != want {
				bad++
				t.Errorf("Leader read %q with term %d; its term is %d", r.v, r.t, want)
			}
			if r.t < last {
				t.Errorf("Leader read term %d after %d", r.t, last)
			}
			last = max(last, r.t)
			if r.frozen {
				whileFrozen++
			}
		}
		t.Logf("%d leaders, %d reads (%d while frozen), %d errors, %d wrong pairs, %d late", len(terms), len(reads), whileFrozen, errs, bad, late)
		if whileFrozen == 0 {
			t.Error("Leader found no leader while a minority master was frozen")
		}
	})
}

// waitLong waits until cond holds, for at most 30 s (a machine under load
// with a frozen master is slow).
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, 30*time.Second, what, cond)
}

// An election with an empty value keeps its term too (the metadata hash
// is kept for it), and a resign leaves nothing but the fencing counter; a
// fair election's term is read too; a fenced lock with metadata that is
// not an election records no term.
func TestElection_emptyValueKeepsTermNoTermOutsideElections(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		c := rs.client(t, path)
		e := newElection(t, c, "ev")
		ld, err := e.Campaign(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		var got election.Leader
		waitUntil(t, "the leader read", func() bool {
			got, err = e.Leader(ctx)
			return err == nil
		})
		if got.Value != "" || got.Term != ld.Term() || got.Term == 0 {
			t.Fatalf("Leader = %+v; want term %d and no value", got, ld.Term())
		}
		if err := ld.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		// A release returns at a quorum: the last master may follow a moment later.
		leftover.None(t, rs.servers) // nothing but the fencing counter after the resign
		// A fair election records its term as well.
		fe := newElection(t, c, "fair-ev", election.WithFair())
		fld, err := fe.Campaign(ctx, "fair one")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := fe.Leader(ctx); err != nil || got.Value != "fair one" || got.Term != fld.Term() {
			t.Fatalf("fair Leader = %+v, %v; want term %d", got, err, fld.Term())
		}
		if err := fld.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		l, err := c.Acquire(ctx, "fm", redlock.WithFencing(), redlock.WithMetadata("m"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		for i, s := range rs.servers {
			if fields, err := redis.Strings(s.Do("HKEYS", layout.MetaKey("fm"))); err != nil || len(fields) > 1 {
				t.Errorf("master %d: metadata fields %q, %v; want the holder's alone", i, fields, err)
			}
		}
	})
}
