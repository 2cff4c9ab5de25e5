package redlock

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestNoteStall_keepsWhatTheEarliestTimerSaw(t *testing.T) {
	st := newStalls(clock.Real())
	defer st.stop()
	now := time.Now()
	st.note(now.Add(-time.Millisecond/2), now) // on time: no stall
	if st.last.Load() != nil {
		t.Fatal("a timer half a millisecond late recorded a stall")
	}
	st.note(now.Add(-100*time.Millisecond), now)
	// Another timer, due later in the same stall, fires a moment after.
	st.note(now.Add(-40*time.Millisecond), now.Add(time.Millisecond/2))
	m := st.last.Load()
	if m == nil || m.len != 100*time.Millisecond || !m.end.Equal(now) {
		t.Fatalf("after two timers of one stall: %+v, want 100ms ending now", m)
	}
	// One due earlier still, in the same moment, saw more of it.
	st.note(now.Add(-150*time.Millisecond), now.Add(time.Millisecond))
	if m := st.last.Load(); m.len != 151*time.Millisecond {
		t.Fatalf("the earliest timer's view was not kept: %+v", m)
	}
	// A later stall replaces it, however short.
	later := now.Add(time.Second)
	st.note(later.Add(-3*time.Millisecond), later)
	if m := st.last.Load(); m.len != 3*time.Millisecond || !m.end.Equal(later) {
		t.Fatalf("a later stall did not replace the record: %+v", m)
	}
}

func TestStallIn_isTheOverlapWithTheWindow(t *testing.T) {
	now := time.Now()
	st := newStalls(clock.Real())
	defer st.stop()
	st.last.Store(&stallMark{end: now.Add(-20 * time.Millisecond), len: 100 * time.Millisecond})
	for _, tc := range []struct {
		window, want time.Duration
	}{
		{10 * time.Millisecond, 0},                       // the window began after the stall
		{50 * time.Millisecond, 30 * time.Millisecond},   // its last 30 ms
		{120 * time.Millisecond, 100 * time.Millisecond}, // all of it
		{time.Second, 100 * time.Millisecond},
	} {
		if got := st.in(now, tc.window); got != tc.want {
			t.Errorf("in(now, %v) = %v, want %v", tc.window, got, tc.want)
		}
	}
	st.last.Store(nil)
	if got := st.in(now, time.Second); got != 0 {
		t.Errorf("with no stall seen: %v", got)
	}
}

func TestBeat_overdueOnlyWhileArmedAndLate(t *testing.T) {
	st := newStalls(clock.Real())
	b := st.newBeat(time.Hour) // it never ticks during the test
	defer b.stop()
	if d := b.overdue(); d != 0 {
		t.Fatalf("an idle beat is overdue by %v", d)
	}
	b.enter()
	defer b.leave()
	if d := b.overdue(); d != 0 {
		t.Fatalf("a beat just armed is overdue by %v", d)
	}
	// As if the process had not run its timers for two periods.
	b.due.Store(int64(st.mono() - 2*time.Hour))
	if d := b.overdue(); d < 2*time.Hour {
		t.Fatalf("a beat two periods late is overdue by %v", d)
	}
}

func TestBeat_stopsTickingWithNoUser(t *testing.T) {
	b := newStalls(clock.Real()).newBeat(time.Millisecond)
	defer b.stop()
	b.enter()
	b.leave()
	redistest.Eventually(t, 5*time.Second, "the beat stops ticking with no user", func() bool { return !b.armed.Load() })
	if d := b.overdue(); d != 0 {
		t.Fatalf("a stopped beat is overdue by %v", d)
	}
	b.enter() // and it starts again
	defer b.leave()
	if !b.armed.Load() {
		t.Fatal("a user did not arm the beat again")
	}
}
