package redlock

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
)

// attack25c: a beat that is behind by a few milliseconds tells that this
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
// These fail as of 9692045; TestAttack25c_hungMastersFailAtTheTimeoutUnderLoad
// shows what it costs a caller.

// setBehind makes b look overdue by late (armed, its timer not running),
// restoring its state when the test ends.
func setBehind(t *testing.T, b *beat, late time.Duration) {
	t.Helper()
	armed, due := b.armed.Load(), b.due.Load()
	b.armed.Store(true)
	b.due.Store(time.Now().Add(-late).UnixNano())
	t.Cleanup(func() {
		b.due.Store(due)
		b.armed.Store(armed)
	})
}

func TestAttack25c_pooledSilenceOfAHungMasterIsNotExcusedByAFewMsBehind(t *testing.T) {
	withStall(t, nil)
	const timeout = 50 * time.Millisecond
	p := newPooled("hung", nil, nil, timeout, clock.Real())
	defer p.beat.stop()
	p.unheard.Store(time.Now().Add(-10 * time.Second).UnixNano()) // unanswered for 10 s
	if s := p.silence(); s < 9*time.Second {
		t.Fatalf("silence %v of a master unanswered for 10 s, with the process on time", s)
	}
	// The beat (period timeout/4 = 12.5 ms) overdue by 15 ms: the process
	// did not run its timers for 15 ms.
	setBehind(t, p.beat, 15*time.Millisecond)
	if s := p.silence(); s < 9*time.Second {
		t.Errorf("silence %v of a master unanswered for 10 s while the process is 15 ms behind on its timers: "+
			"the hung master is not silent at all (want about 10 s less the 15 ms)", s)
	}
}

func TestAttack25c_muxBlamedSilenceOfAHungMasterIsNotExcusedByAFewMsBehind(t *testing.T) {
	withStall(t, nil)
	const timeout = 50 * time.Millisecond
	mc := &muxConn{mx: &mux{timeout: timeout}, born: time.Now().Add(-10 * time.Second)}
	mc.oldest.Store(1) // the command waited for was written 10 s ago, nothing heard since
	if err := mc.down(); err == nil {
		t.Fatal("a master silent for 10 s is not down, with the process on time")
	}
	// roundBeat (5 ms period) overdue by 8 ms.
	setBehind(t, roundBeat, 8*time.Millisecond)
	if s := mc.blamed(timeout); s < 9*time.Second {
		t.Errorf("blamed silence %v of a master silent for 10 s while the process is 8 ms behind on its timers "+
			"(want about 10 s less the 8 ms)", s)
	}
	if err := mc.down(); err == nil {
		t.Errorf("a master silent for 10 s is not down while the process is 8 ms behind on its timers")
	}
}
