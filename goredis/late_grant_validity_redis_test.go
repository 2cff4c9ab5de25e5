package goredis

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// busyScript is a script that keeps its master busy for ARGV[1] ms.
const busyScript = `local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= tonumber(ARGV[1]) * 1000
return 1`

// TestLateGrant_readThroughTheWaitDoesNotOverstateValidity: on each
// master a busy script (another connection) holds the server 40 ms; the
// lane has a PING in flight behind it, so the acquisition's SET is handed
// to go-redis only when that PING is answered, late in the round; a second
// busy script holds the server another 40 ms, so the SET is answered after
// the per-master timeout. A stall of this process is then entered in each
// lane as its watchdog would have seen it, so the lane keeps the SET past
// its deadline and its Silence is below the timeout when the round's
// timer fires: the Client waits on and reads the grant late. (Without
// the stall, the lane settles the SET at its deadline and no grant is
// read late: the test then checked nothing.)
// A lock so granted must not outlive the keys: its Until is no later than
// the second-latest key expiry (a quorum of 2 of 3) less the drift.
func TestLateGrant_readThroughTheWaitDoesNotOverstateValidity(t *testing.T) {
	const timeout = 50 * time.Millisecond
	const ttl = 2 * time.Second
	var ts []transport.Transport
	var lanes []*lane
	var side1, side2 []*redis.Client
	for range 3 {
		s := startServer(t)
		tr := NewTransport(newClient(t, s))
		ts = append(ts, tr)
		lanes = append(lanes, tr.lane)
		side1 = append(side1, newClient(t, s))
		side2 = append(side2, newClient(t, s))
	}
	c, err := redlock.NewWithTransports(ts, redlock.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, sc := range append(side1, side2...) {
		if err := sc.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Warm up: the masters identified, the scripts loaded (else the
	// call waits for them before its round starts).
	if l, err := c.TryAcquire(context.Background(), "hung-late-warm"); err != nil {
		t.Fatal(err)
	} else {
		_ = l.Release(context.Background())
	}
	drift := time.Duration(float64(ttl)*redlock.DefaultDriftFactor) + 2*time.Millisecond
	// The grant is read after the timeout in a minority of rounds (0-4
	// of 20 here): run until 3 were, up to 100 rounds, so that the case
	// this test is about is checked, not only grants read in time.
	iters := 100
	if testing.Short() {
		iters = 5
	}
	late, won := 0, 0
	for i := 0; i < iters && late < 3; i++ {
		var wg sync.WaitGroup
		busy := func(sc *redis.Client) {
			defer wg.Done()
			_ = sc.Eval(context.Background(), busyScript, nil, 40).Err()
		}
		for _, sc := range side1 {
			wg.Add(1)
			go busy(sc)
		}
		time.Sleep(2 * time.Millisecond)
		for _, l := range lanes {
			r, _ := cmd(time.Second, "PING")
			l.send(r)
		}
		time.Sleep(2 * time.Millisecond) // the subject: the schedule's phase: the acquisition starts 2 ms after the PINGs, and the stall below is timed from it
		go func() {
			time.Sleep(15 * time.Millisecond)
			for _, sc := range side2 {
				wg.Add(1)
				go busy(sc)
			}
			// A stall of this process, as the lanes' watchdogs would
			// have seen it (a stopped process): the SET's due time moves
			// back and its batch's silence is excused, so the Client
			// waits on and reads the grant after the timeout. (On a
			// process that runs on time the lane settles the SET at its
			// deadline, and no grant is read late.)
			time.Sleep(25 * time.Millisecond) // the subject: the stall's moment, after the SET's hand-off, before its deadline
			for _, l := range lanes {
				l.mu.Lock()
				l.stallLocked(100*time.Millisecond, time.Now())
				l.mu.Unlock()
			}
			wg.Done()
		}()
		wg.Add(1)
		key := fmt.Sprint("hung-late-", i)
		start := time.Now()
		l, err := c.TryAcquire(context.Background(), key, redlock.WithTTL(ttl))
		el := time.Since(start)
		wg.Wait()
		if err != nil {
			continue
		}
		won++
		if el > timeout {
			late++
		}
		// Each key's expiry is at most after+PTTL+1 ms (PTTL is read
		// between before and after, in whole milliseconds).
		var exp []time.Time
		for _, sc := range side1 {
			p, err := sc.PTTL(context.Background(), key).Result()
			after := time.Now()
			if err == nil && p > 0 {
				exp = append(exp, after.Add(p+time.Millisecond))
			}
		}
		slices.SortFunc(exp, func(a, b time.Time) int { return b.Compare(a) })
		if len(exp) < 2 {
			t.Fatalf("lock granted after %v with %d keys set", el, len(exp))
		}
		if bound := exp[1].Add(-drift); l.Until().After(bound) {
			t.Errorf("lock granted after %v: Until is %v past the quorum's expiry less the drift", el, l.Until().Sub(bound))
		}
		if os.Getenv("QUORUMLOCK_MEASURE") != "" {
			t.Logf("granted after %v: Until-start %v, exp-start %v", el, l.Until().Sub(start), []time.Duration{exp[0].Sub(start), exp[1].Sub(start)})
		}
		if l.Until().After(start.Add(ttl - drift + time.Millisecond)) {
			t.Errorf("lock granted after %v: Until is %v past the call's start+TTL-drift", el, l.Until().Sub(start.Add(ttl-drift)))
		}
		_ = l.Release(context.Background())
	}
	t.Logf("%d granted, %d of them after the timeout", won, late)
	if late == 0 && !testing.Short() {
		t.Errorf("no grant was read after the timeout in %d rounds: the case this test checks did not occur", iters)
	}
}
