package integration_test

// The drift allowance alone between a holder's validity and the next
// grant: a quorum of masters whose clocks run fast, nothing else faulty.
//
// A key granted on five masters goes on the three fast ones (rate r) after
// TTL/r of real time from the moment each ran the SET, and a second client
// then wins those three — a quorum — while the other two still hold the
// first key. Each SET runs after the round's start, so no second grant
// comes before start + TTL/r, whatever the load; the holder's Until() is
// start + TTL − drift, drift = TTL × driftFactor + 2 ms. With r below
// 1/(1 − driftFactor) (docs/safety.md, assumption 4) the next grant comes
// after Until(). A client that set aside nothing for drift would believe
// in its lock until start + TTL − 2 ms, long after the fast three let it
// go: the numbers below make that overlap hundreds of milliseconds, so a
// lock whose validity leaves the drift term out fails this test
// (integration/testdata/mutants), and the real one passes it by hundreds
// of milliseconds that no load can shrink.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/redlock"
)

// The hand-over suite's numbers. The allowance is TTL × factor = 800 ms;
// the fast masters keep a key 3 556 ms (TTL/r), so the next grant comes
// at least 358 ms after the holder's Until() (start + 3 198 ms), and a
// lock without the drift term (Until at start + 3 998 ms) would still be
// held 442 ms after it, less the time the next client takes to notice.
// The factor is large so that both sides are hundreds of milliseconds on
// a short TTL: the margin is TTL × (factor − (1 − 1/r)), whatever the
// factor.
const (
	handoverTTL         = 4 * time.Second
	handoverDriftFactor = 0.2
	handoverFastRate    = 1.125 // the bound is 1/(1 − 0.2) = 1.25
	handoverFast        = 3     // masters 0–2: a quorum of five
	handoverKeys        = 3     // keys contended at once, two clients each
	handoversPerKey     = 3     // hand-overs measured on each key
	pollEvery           = 10 * time.Millisecond
)

// grant is one holding of a key: from TryAcquire returning to Until(); the
// holder keeps it to the end and never releases it, so the key passes on
// only by expiring.
type grant struct {
	key, client    int
	granted, until time.Time
}

// handover is two consecutive grants of a key: margin is how long after
// the earlier one's Until() the later one was granted (negative: both
// held the key at once); noDrift is how long the earlier holder would
// still have believed in its lock had its validity left out the drift
// term (positive: that lock would have overlapped the next).
type handover struct {
	prev, next      grant
	margin, noDrift time.Duration
}

func TestClockDrift_fastQuorumFreesKeyOnlyAfterValidity(t *testing.T) {
	t.Log("clock faults run on the process backend (the docker image carries no clock shim)")
	c := cluster.Start(t, 5, cluster.WithBackend(cluster.Process), cluster.WithClockFaults())
	for i := 0; i < handoverFast; i++ {
		must(t, c.Masters[i].SetClockRate(handoverFastRate))
	}
	var clients []*redlock.Client
	for _, p := range connPaths {
		clients = append(clients, newClient(t, p, c, redlock.WithDriftFactor(handoverDriftFactor)))
	}

	// Each round of hand-overs takes TTL/r (3.56 s); the bound allows a
	// machine many times slower than a quiet one.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	began := time.Now()
	var (
		mu     sync.Mutex
		grants = make([][]grant, handoverKeys)
		wg     sync.WaitGroup
	)
	for k := 0; k < handoverKeys; k++ {
		name := fmt.Sprintf("%s:%d", key(t), k)
		// keyCtx ends once key k has its hand-overs (its first grant is
		// not one), which stops its waiting client.
		keyCtx, done := context.WithCancel(ctx)
		defer done()
		for id, client := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each client tries every pollEvery while it does not
				// hold the key: a waiting Acquire would poll only every
				// TTL/2 once subscribed to release notices, and an
				// expiry sends none.
				poll := time.NewTicker(pollEvery)
				defer poll.Stop()
				for keyCtx.Err() == nil {
					l, err := client.TryAcquire(keyCtx, name, redlock.WithTTL(handoverTTL))
					granted := time.Now()
					if errors.Is(err, redlock.ErrNotAcquired) && keyCtx.Err() == nil {
						select {
						case <-poll.C:
						case <-keyCtx.Done():
						}
						continue
					}
					if err != nil {
						if keyCtx.Err() == nil {
							t.Errorf("key %d, %s client: %v", k, connPaths[id].name, err)
						}
						return
					}
					until := l.Until()
					mu.Lock()
					grants[k] = append(grants[k], grant{key: k, client: id, granted: granted, until: until})
					if len(grants[k]) > handoversPerKey {
						done()
					}
					mu.Unlock()
					// Hold to the end of the validity, then let the key
					// expire: a release would hand it over early.
					wait := time.NewTimer(time.Until(until))
					select {
					case <-wait.C:
					case <-keyCtx.Done():
						wait.Stop()
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(began)
	if ctx.Err() != nil {
		t.Fatalf("the hand-overs did not come within %v", elapsed.Round(time.Second))
	}

	if t.Failed() {
		return // a client's error, reported
	}
	var hs []handover
	for k := range grants {
		gs := grants[k]
		slices.SortFunc(gs, func(a, b grant) int { return a.granted.Compare(b.granted) })
		for i := 1; i < len(gs); i++ {
			// Against the latest Until before it, not only the previous
			// grant's, so that any two overlapping holdings are caught.
			prev := gs[0]
			for _, g := range gs[1:i] {
				if g.until.After(prev.until) {
					prev = g
				}
			}
			next := gs[i]
			hs = append(hs, handover{prev: prev, next: next,
				margin:  next.granted.Sub(prev.until),
				noDrift: prev.until.Add(time.Duration(float64(handoverTTL) * handoverDriftFactor)).Sub(next.granted)})
		}
	}
	margins := make([]time.Duration, len(hs))
	noDrift := make([]time.Duration, len(hs))
	overlapping, discriminating := 0, 0
	for i, h := range hs {
		margins[i], noDrift[i] = h.margin, h.noDrift
		if h.margin < 0 {
			overlapping++
			t.Errorf("key %d: %s client's lock was valid until %v, but the %s client was granted it at %v (%v early)",
				h.prev.key, connPaths[h.prev.client].name, h.prev.until.Format("15:04:05.000"),
				connPaths[h.next.client].name, h.next.granted.Format("15:04:05.000"), -h.margin.Round(time.Millisecond))
		}
		if h.noDrift > 0 {
			discriminating++
		}
	}
	slices.Sort(margins)
	slices.Sort(noDrift)
	t.Logf("%d hand-overs in %v (TTL %v, drift factor %v, masters 0–%d %v× fast): next grant after the holder's Until() by %v (min) to %v (max); without the drift term the holder would still have held it %v (min) to %v (max)",
		len(hs), elapsed.Round(time.Millisecond), handoverTTL, handoverDriftFactor, handoverFast-1, handoverFastRate,
		margins[0].Round(time.Millisecond), margins[len(margins)-1].Round(time.Millisecond),
		noDrift[0].Round(time.Millisecond), noDrift[len(noDrift)-1].Round(time.Millisecond))
	// The run's power: a hand-over that came before the moment a lock
	// without the drift term would have ended is one that lock would
	// have failed. With none, this run would have passed it too (the
	// next clients were too slow to notice the expiry).
	if discriminating == 0 {
		t.Errorf("no hand-over came within the drift allowance of the holder's Until(): this run could not tell a lock without it from a correct one")
	}
	t.Logf("%d of %d hand-overs overlapped; %d of %d would have without the drift term", overlapping, len(hs), discriminating, len(hs))
}
