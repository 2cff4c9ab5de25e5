package redigot

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/stall"
)

// setBehind makes b look overdue by late (armed, its timer not running),
// restoring its state when the test ends.
func setBehind(t *testing.T, b *stall.Beat, late time.Duration) {
	t.Helper()
	t.Cleanup(b.SetBehind(late))
}

func TestSilence_pooledHungMasterNotExcusedByAFewMsBehind(t *testing.T) {
	const timeout = 50 * time.Millisecond
	p := newPooled("hung", nil, nil, timeout, stall.New(clock.Real()))
	defer p.beat.Stop()
	p.epoch = p.epoch.Add(-time.Minute)
	p.unheard.Store(int64(p.clock.Since(p.epoch)-10*time.Second) + 1) // unanswered for 10 s
	if s := p.Silence(); s < 9*time.Second {
		t.Fatalf("silence %v of a master unanswered for 10 s, with the process on time", s)
	}
	// The beat (period timeout/4 = 12.5 ms) overdue by 15 ms: the process
	// did not run its timers for 15 ms.
	setBehind(t, p.beat, 15*time.Millisecond)
	if s := p.Silence(); s < 9*time.Second {
		t.Errorf("silence %v of a master unanswered for 10 s while the process is 15 ms behind on its timers: "+
			"the hung master is not silent at all (want about 10 s less the 15 ms)", s)
	}
}

func TestSilence_muxHungMasterNotExcusedByAFewMsBehind(t *testing.T) {
	const timeout = 50 * time.Millisecond
	st := stall.New(clock.Real())
	defer st.Stop()
	mc := &muxConn{mx: &mux{timeout: timeout, stalls: st}, born: time.Now().Add(-10 * time.Second)}
	mc.oldest.Store(1) // the command waited for was written 10 s ago, nothing heard since
	if err := mc.down(); err == nil {
		t.Fatal("a master silent for 10 s is not down, with the process on time")
	}
	// The client's round beat (5 ms period) overdue by 8 ms.
	setBehind(t, st.Rounds, 8*time.Millisecond)
	if s := mc.blamed(timeout); s < 9*time.Second {
		t.Errorf("blamed silence %v of a master silent for 10 s while the process is 8 ms behind on its timers "+
			"(want about 10 s less the 8 ms)", s)
	}
	if err := mc.down(); err == nil {
		t.Errorf("a master silent for 10 s is not down while the process is 8 ms behind on its timers")
	}
}
