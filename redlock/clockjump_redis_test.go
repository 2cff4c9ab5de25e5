package redlock_test

// The client's own wall clock: a lock's validity is measured on the
// monotonic clock, so a jump of the client machine's wall clock between
// the start of a round and its end changes nothing. Go's runtime reads
// the clocks through the vDSO, not libc, so no preload library can make
// a Go process's wall clock jump, and stepping the machine's clock would
// disturb everything else on it. The test does what such a jump does to
// the readings Go hands out: time.Now() keeps its monotonic reading and
// only the wall reading moves (wallJumped). A clock that reads the wall
// only (wallOnly, the control) shows that the jump lands inside the
// validity computation: there the same jump breaks the lock.

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/redlock"
)

// wallJumped returns what time.Now() would have returned had the wall
// clock been d further: the same monotonic reading, the wall reading
// moved by d (whole seconds). It relies on time.Time's layout (wall,
// ext, loc; with a monotonic reading, wall holds 33 bits of seconds
// since 1885 above 30 bits of nanoseconds) and checks the result, so a
// change of that layout fails the test rather than proving nothing.
func wallJumped(t *testing.T, now time.Time, d time.Duration) time.Time {
	const hasMonotonic, nsecShift = 1 << 63, 30
	type timeLayout struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	if d%time.Second != 0 {
		t.Fatalf("wallJumped: %v is not whole seconds", d)
	}
	j := now
	p := (*timeLayout)(unsafe.Pointer(&j))
	if p.wall&hasMonotonic == 0 {
		t.Fatal("wallJumped: time.Now() carries no monotonic reading")
	}
	p.wall = uint64(int64(p.wall) + int64(d/time.Second)<<nsecShift)
	if j.Sub(now) != 0 || j.Round(0).Sub(now.Round(0)) != d {
		t.Fatalf("wallJumped: time.Time's layout is not what the test knows (Sub %v, wall moved %v)", j.Sub(now), j.Round(0).Sub(now.Round(0)))
	}
	return j
}

// jumpingClock is the real clock whose wall reading jumps by jump at the
// first Since after arm: between the start of an acquisition's round and
// the computation of its validity.
type jumpingClock struct {
	t        *testing.T
	wallOnly bool // the control: readings without a monotonic part
	jump     time.Duration
	armed    atomic.Bool
	offset   atomic.Int64
}

func (c *jumpingClock) Now() time.Time {
	now, off := time.Now(), time.Duration(c.offset.Load())
	if c.wallOnly {
		return now.Round(0).Add(off)
	}
	return wallJumped(c.t, now, off)
}

func (c *jumpingClock) Since(t time.Time) time.Duration {
	if c.armed.CompareAndSwap(true, false) {
		c.offset.Add(int64(c.jump))
	}
	return c.Now().Sub(t)
}

func (c *jumpingClock) NewTimer(d time.Duration) clock.Timer { return clock.Real().NewTimer(d) }

func TestClockJump_clientWallClockJumpChangesNothing(t *testing.T) {
	rs := startReal(t, 3)
	const ttl = 5 * time.Second
	for _, tc := range []struct {
		name     string
		wallOnly bool
		jump     time.Duration
	}{
		{"monotonic/forward", false, time.Hour},
		{"monotonic/back", false, -time.Hour},
		{"wall-only/forward", true, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &jumpingClock{t: t, wallOnly: tc.wallOnly, jump: tc.jump}
			c := rs.client(t, pipelinedPath, redlock.WithClock(clk)) // the validity does not depend on the path
			key := "clockjump:" + tc.name
			// A client's first call identifies the masters (run_ids)
			// first, reading the clock: make it before arming, so that
			// the jump lands inside the acquisition's round.
			warm, err := c.TryAcquire(ctxT(t), key+":warm-up")
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			clk.armed.Store(true)
			// One attempt: a wall-only clock that jumped stays jumped, so a
			// second attempt would measure from the jumped reading.
			l, err := c.TryAcquire(ctxT(t), key, redlock.WithTTL(ttl))
			if clk.armed.Load() {
				t.Fatal("the jump did not happen during the acquisition")
			}
			var left time.Duration // on the real clock
			if l != nil {
				left = time.Until(l.Until())
				defer l.Release(ctxT(t))
			}
			switch {
			case !tc.wallOnly:
				// What a jump changes nothing of: the lock is granted with
				// the validity a round without a jump gives.
				if err != nil {
					t.Fatalf("a %v wall-clock jump failed the acquisition: %v", tc.jump, err)
				}
				if left > ttl || left < ttl-2*time.Second {
					t.Fatalf("after a %v jump the validity left is %v, want within 2s under %v (not an hour off)", tc.jump, left, ttl)
				}
				// The lock works on: Extend, and no loss.
				if err := l.Extend(ctxT(t), ttl); err != nil {
					t.Fatalf("Extend after the jump: %v", err)
				}
				if left := time.Until(l.Until()); left > ttl || left < ttl-2*time.Second {
					t.Fatalf("after Extend the validity left is %v", left)
				}
				select {
				case <-l.Lost():
					t.Fatal("the lock was reported lost after a wall-clock jump")
				case <-time.After(200 * time.Millisecond):
				}
				t.Logf("%v jump: granted, %v of validity left", tc.jump, left.Round(time.Millisecond))
			default:
				// The control: a clock of wall readings counts the hour as
				// elapsed, and the lock is refused. (A jump back could not
				// lengthen the lock even there: Until is the round's start
				// plus TTL − drift; the elapsed time only gates the grant.)
				if err == nil {
					t.Fatalf("a wall-only clock's %v jump left %v of validity: the jump did not reach the computation", tc.jump, left)
				}
				t.Logf("control, %v jump on a wall-only clock: %v", tc.jump, err)
			}
		})
	}
}
