package stall

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
)

func TestNoteStall_keepsWhatTheEarliestTimerSaw(t *testing.T) {
	st := New(clock.Real())
	defer st.Stop()
	now := time.Now()
	st.Note(now.Add(-time.Millisecond/2), now) // on time: no stall
	if st.last.Load() != nil {
		t.Fatal("a timer half a millisecond late recorded a stall")
	}
	st.Note(now.Add(-100*time.Millisecond), now)
	// Another timer, due later in the same stall, fires a moment after.
	st.Note(now.Add(-40*time.Millisecond), now.Add(time.Millisecond/2))
	m := st.last.Load()
	if m == nil || m.len != 100*time.Millisecond || !m.end.Equal(now) {
		t.Fatalf("after two timers of one stall: %+v, want 100ms ending now", m)
	}
	// One due earlier still, in the same moment, saw more of it.
	st.Note(now.Add(-150*time.Millisecond), now.Add(time.Millisecond))
	if m := st.last.Load(); m.len != 151*time.Millisecond {
		t.Fatalf("the earliest timer's view was not kept: %+v", m)
	}
	// A later stall replaces it, however short.
	later := now.Add(time.Second)
	st.Note(later.Add(-3*time.Millisecond), later)
	if m := st.last.Load(); m.len != 3*time.Millisecond || !m.end.Equal(later) {
		t.Fatalf("a later stall did not replace the record: %+v", m)
	}
}

func TestStallIn_isTheOverlapWithTheWindow(t *testing.T) {
	now := time.Now()
	st := New(clock.Real())
	defer st.Stop()
	st.last.Store(&stallMark{end: now.Add(-20 * time.Millisecond), len: 100 * time.Millisecond})
	for _, tc := range []struct {
		window, want time.Duration
	}{
		{10 * time.Millisecond, 0},                       // the window began after the stall
		{50 * time.Millisecond, 30 * time.Millisecond},   // its last 30 ms
		{120 * time.Millisecond, 100 * time.Millisecond}, // all of it
		{time.Second, 100 * time.Millisecond},
	} {
		if got := st.In(now, tc.window); got != tc.want {
			t.Errorf("in(now, %v) = %v, want %v", tc.window, got, tc.want)
		}
	}
	st.last.Store(nil)
	if got := st.In(now, time.Second); got != 0 {
		t.Errorf("with no stall seen: %v", got)
	}
}

func TestBeat_overdueOnlyWhileArmedAndLate(t *testing.T) {
	st := New(clock.Real())
	b := st.NewBeat(time.Hour) // it never ticks during the test
	defer b.Stop()
	if d := b.Overdue(); d != 0 {
		t.Fatalf("an idle beat is overdue by %v", d)
	}
	b.Enter()
	defer b.Leave()
	if d := b.Overdue(); d != 0 {
		t.Fatalf("a beat just armed is overdue by %v", d)
	}
	// As if the process had not run its timers for two periods.
	b.due.Store(int64(st.mono() - 2*time.Hour))
	if d := b.Overdue(); d < 2*time.Hour {
		t.Fatalf("a beat two periods late is overdue by %v", d)
	}
}

func TestBeat_stopsTickingWithNoUser(t *testing.T) {
	b := New(clock.Real()).NewBeat(time.Millisecond)
	defer b.Stop()
	b.Enter()
	b.Leave()
	deadline := time.Now().Add(5 * time.Second)
	for b.armed.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the beat still ticks with no user")
		}
		time.Sleep(time.Millisecond)
	}
	if d := b.Overdue(); d != 0 {
		t.Fatalf("a stopped beat is overdue by %v", d)
	}
	b.Enter() // and it starts again
	defer b.Leave()
	if !b.armed.Load() {
		t.Fatal("a user did not arm the beat again")
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
