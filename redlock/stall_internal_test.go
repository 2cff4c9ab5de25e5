package redlock

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// withStall runs f with lastStall set to m, restoring it after.
func withStall(t *testing.T, m *stallMark) {
	old := lastStall.Load()
	lastStall.Store(m)
	t.Cleanup(func() { lastStall.Store(old) })
}

func TestNoteStall_keepsWhatTheEarliestTimerSaw(t *testing.T) {
	withStall(t, nil)
	now := time.Now()
	noteStall(now.Add(-time.Millisecond/2), now) // on time: no stall
	if lastStall.Load() != nil {
		t.Fatal("a timer half a millisecond late recorded a stall")
	}
	noteStall(now.Add(-100*time.Millisecond), now)
	// Another timer, due later in the same stall, fires a moment after.
	noteStall(now.Add(-40*time.Millisecond), now.Add(time.Millisecond/2))
	m := lastStall.Load()
	if m == nil || m.len != 100*time.Millisecond || !m.end.Equal(now) {
		t.Fatalf("after two timers of one stall: %+v, want 100ms ending now", m)
	}
	// One due earlier still, in the same moment, saw more of it.
	noteStall(now.Add(-150*time.Millisecond), now.Add(time.Millisecond))
	if m := lastStall.Load(); m.len != 151*time.Millisecond {
		t.Fatalf("the earliest timer's view was not kept: %+v", m)
	}
	// A later stall replaces it, however short.
	later := now.Add(time.Second)
	noteStall(later.Add(-3*time.Millisecond), later)
	if m := lastStall.Load(); m.len != 3*time.Millisecond || !m.end.Equal(later) {
		t.Fatalf("a later stall did not replace the record: %+v", m)
	}
}

func TestStallIn_isTheOverlapWithTheWindow(t *testing.T) {
	now := time.Now()
	withStall(t, &stallMark{end: now.Add(-20 * time.Millisecond), len: 100 * time.Millisecond})
	for _, tc := range []struct {
		window, want time.Duration
	}{
		{10 * time.Millisecond, 0},                       // the window began after the stall
		{50 * time.Millisecond, 30 * time.Millisecond},   // its last 30 ms
		{120 * time.Millisecond, 100 * time.Millisecond}, // all of it
		{time.Second, 100 * time.Millisecond},
	} {
		if got := stallIn(now, tc.window); got != tc.want {
			t.Errorf("stallIn(now, %v) = %v, want %v", tc.window, got, tc.want)
		}
	}
	withStall(t, nil)
	if got := stallIn(now, time.Second); got != 0 {
		t.Errorf("with no stall seen: %v", got)
	}
}

func TestBeat_overdueOnlyWhileArmedAndLate(t *testing.T) {
	b := newBeat(time.Hour) // it never ticks during the test
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
	b.due.Store(int64(mono() - 2*time.Hour))
	if d := b.overdue(); d < 2*time.Hour {
		t.Fatalf("a beat two periods late is overdue by %v", d)
	}
}

func TestBeat_stopsTickingWithNoUser(t *testing.T) {
	b := newBeat(time.Millisecond)
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
