package stall

import (
	"testing"
	"time"
	"unsafe"
)

// wallStepped returns what time.Now() would have returned had the wall
// clock been stepped by d: the same monotonic reading, the wall reading
// moved by d (whole seconds). Go reads the clocks through the vDSO, so a
// test cannot step the process's wall clock; this is what such a step
// does to the readings. It relies on time.Time's layout (wall, ext, loc;
// with a monotonic reading, wall holds 33 bits of seconds since 1885
// above 30 bits of nanoseconds) and checks the result, so a change of
// that layout fails the test rather than proving nothing.
func wallStepped(t *testing.T, now time.Time, d time.Duration) time.Time {
	t.Helper()
	const hasMonotonic, nsecShift = 1 << 63, 30
	type timeLayout struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	if d%time.Second != 0 {
		t.Fatalf("wallStepped: %v is not whole seconds", d)
	}
	j := now
	p := (*timeLayout)(unsafe.Pointer(&j))
	if p.wall&hasMonotonic == 0 {
		t.Fatal("wallStepped: the time carries no monotonic reading")
	}
	p.wall = uint64(int64(p.wall) + int64(d/time.Second)<<nsecShift)
	if j.Sub(now) != 0 || j.Round(0).Sub(now.Round(0)) != d {
		t.Fatalf("wallStepped: time.Time's layout is not what the test knows (Sub %v, wall moved %v)", j.Sub(now), j.Round(0).Sub(now.Round(0)))
	}
	return j
}

// A slow spell is forgotten by the monotonic clock: the wall clock
// stepped back an hour (an NTP step, a VM restored) neither keeps the
// peaks at their height for that hour nor, stepped forward, forgets them
// at once.
func TestAdaptiveBound_forgetsASlowSpellWhateverTheWallClockDoes(t *testing.T) {
	for _, step := range []time.Duration{-time.Hour, time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			c := boundClient(3, 50*time.Millisecond)
			now := time.Now()
			for i := range 3 {
				c.Note(i, now.Add(-100*time.Millisecond), now)
			}
			// One half-life later the peaks are half as high: 50 ms,
			// twice that the bound; six later, nothing is left of them.
			if got, want := c.For(8*time.Second, wallStepped(t, now.Add(boundHalfLife), step)), 100*time.Millisecond; got != want {
				t.Errorf("one half-life later, the wall clock stepped %v: bound %v, want %v", step, got, want)
			}
			if got := c.For(8*time.Second, wallStepped(t, now.Add(6*boundHalfLife), step)); got != c.timeout {
				t.Errorf("six half-lives later, the wall clock stepped %v: bound %v, want the timeout %v", step, got, c.timeout)
			}
		})
	}
}
