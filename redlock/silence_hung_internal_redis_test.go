package redlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// A beat that is behind by a few milliseconds tells that this
// process has not run its timers for that long — not that a master that
// has been silent for ten seconds answered. Under CPU load from this
// process's own goroutines (a busy goroutine per P, as a CPU-bound
// application has), Go runs timers late by up to a preemption quantum
// (10 ms) and more, so the beat is "behind" much of the time; each time,
// blamed and the pooled silence count a hung master as not silent at all
// (down is skipped, collect's overdue waits a whole timeout more, a pooled
// read gets lateBound). The excuse should be bounded by how far behind
// the beat is, not be the whole silence.
//
// The silence is reduced by how far behind the beat is, not zeroed;
// TestTryAcquire_hungMastersFailAtTheTimeoutUnderLoad shows what it cost
// a caller.

// A client on a fake clock moved by an hour while its round waits (its
// collect timer "fires an hour late" on that clock) records no stall of
// this process: a bogus hour would excuse the client's hung masters
// (stalls.in). Both paths, one master of three stopped so that the
// round waits for the timer; no goroutine is left after Close (goleak in
// TestMain covers the beat timers of the closed transports).
func TestStall_fakeClockRecordsNoStall(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 3)
	addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
	if _, err := servers[1].Do("SET", "silence:fake", "someone-else", "PX", 60000); err != nil {
		t.Fatal(err)
	}
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[2].Resume()
	for _, pipelined := range []bool{true, false} {
		fake := clock.NewFake(time.Unix(1_700_000_000, 0))
		c, err := newRedigoFromAddrs(addrs, WithClock(fake), WithTimeout(50*time.Millisecond), withPipelining(pipelined))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := c.TryAcquire(context.Background(), "silence:fake", WithTTL(time.Minute))
			done <- err
		}()
		deadline := time.Now().Add(5 * time.Second)
	wait:
		for {
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("pipelined=%v: acquired a key held elsewhere with a master stopped", pipelined)
				}
				break wait
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("pipelined=%v: TryAcquire did not end", pipelined)
			}
			fake.Advance(time.Hour)
			time.Sleep(5 * time.Millisecond)
		}
		if _, d, ok := c.stalls.Last(); ok && d >= time.Second {
			t.Errorf("pipelined=%v: a fake-clock client recorded a stall of %v", pipelined, d)
		}
		c.Close()
	}
}

// Clients made and closed while rounds wait (the pooled beat per master,
// the client's round beat) leave no goroutine and no beat in use: the
// beats stop at Close.
func TestBeat_leavesNothingAfterClose(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 3)
	addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
	ignore := goleak.IgnoreCurrent()
	for i := range 10 {
		c, err := newRedigoFromAddrs(addrs, WithTimeout(50*time.Millisecond), withPipelining(i%2 == 0))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 20 {
					l, err := c.TryAcquire(context.Background(), fmt.Sprintf("silence:beat:%d:%d:%d", i, g, j))
					if err == nil {
						_ = l.Release(context.Background())
					}
				}
			}()
		}
		wg.Wait()
		c.Close()
		for _, m := range c.masters {
			if p, ok := m.t.(redigot.PooledState); ok && p.BeatUsers() != 0 {
				t.Errorf("a closed pooled transport's beat has %d users", p.BeatUsers())
			}
		}
		if n := c.stalls.Rounds.Users(); n != 0 {
			t.Errorf("a closed client's round beat has %d users", n)
		}
	}
	goleak.VerifyNone(t, ignore)
}
