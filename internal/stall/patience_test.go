package stall

import (
	"testing"
	"time"
)

func TestPatience_boundIsTheDeadlineAndLateBoundMore(t *testing.T) {
	deadline := time.Unix(100, 0)
	p := NewPatience(50*time.Millisecond, deadline)
	if want := deadline.Add(time.Second); !p.Bound.Equal(want) {
		t.Fatalf("Bound = %v, want %v (a second: LateBound of 50ms)", p.Bound, want)
	}
	if got := p.First(deadline); !got.Equal(deadline.Add(50 * time.Millisecond)) {
		t.Fatalf("First = %v, want one timeout past the end of the wait", got)
	}
}

func TestPatience_lateTimerGivesTheReadersAsLongAgainAtMostATimeout(t *testing.T) {
	p := NewPatience(50*time.Millisecond, time.Unix(100, 0))
	for _, c := range []struct{ lateBy, want time.Duration }{
		{0, 0},
		{time.Millisecond, 0}, // on time
		{20 * time.Millisecond, 20 * time.Millisecond},
		{time.Second, 50 * time.Millisecond},
	} {
		if got := p.Late(c.lateBy); got != c.want {
			t.Errorf("Late(%v) = %v, want %v", c.lateBy, got, c.want)
		}
	}
}

func TestPatience_masterIsBlamedOnlyOnceSilentForATimeout(t *testing.T) {
	deadline := time.Unix(100, 0)
	p := NewPatience(50*time.Millisecond, deadline)
	now := deadline
	until := deadline.Add(time.Hour) // Bound cuts it
	if got := p.More(now, until, 0, 50*time.Millisecond); got != 0 {
		t.Errorf("silent for the whole timeout: More = %v, want 0", got)
	}
	if got := p.More(now, until, 0, 20*time.Millisecond); got != 30*time.Millisecond {
		t.Errorf("silent for 20ms: More = %v, want the 30ms left", got)
	}
	if got := p.More(now, until, 0, 49900*time.Microsecond); got != time.Millisecond {
		t.Errorf("almost silent for a timeout: More = %v, want at least a millisecond", got)
	}
	if got := p.More(now, until, 40*time.Millisecond, 50*time.Millisecond); got != 40*time.Millisecond {
		t.Errorf("allow 40ms: More = %v, want 40ms", got)
	}
	if got := p.More(now, until, -time.Millisecond); got != 0 {
		t.Errorf("nothing allowed, no master: More = %v, want 0", got)
	}
}

func TestPatience_neverWaitsPastUntilNorBound(t *testing.T) {
	deadline := time.Unix(100, 0)
	p := NewPatience(50*time.Millisecond, deadline)
	now := deadline
	if got := p.More(now, now.Add(10*time.Millisecond), 0, 0); got != 10*time.Millisecond {
		t.Errorf("until in 10ms: More = %v, want 10ms", got)
	}
	if got := p.More(p.Bound.Add(-5*time.Millisecond), p.Bound.Add(time.Hour), 0, 0); got != 5*time.Millisecond {
		t.Errorf("5ms before Bound: More = %v, want 5ms", got)
	}
	if got := p.More(p.Bound, p.Bound.Add(time.Hour), time.Second, 0); got != 0 {
		t.Errorf("at Bound: More = %v, want 0", got)
	}
}
