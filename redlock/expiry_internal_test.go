package redlock

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/waker"
)

// A waiting plain attempt's replies give the moment the key is free on a
// quorum: the quorum-th soonest, or the latest when fewer told; grants
// count as free at once; refusals that do not tell (negative, or beyond
// maxHint, as a hostile master may answer) count as nothing.
func TestExpiry_freeInIsTheQuorumthSoonestTold(t *testing.T) {
	for _, tc := range []struct {
		name    string
		quorum  int
		answers []any // int64: refused with that TTL (ms); "OK": granted; nil: no answer
		want    time.Duration
		ok      bool
	}{
		{"none told", 2, []any{nil, nil, nil}, 0, false},
		{"quorum of three", 2, []any{int64(300), int64(100), int64(200)}, 201 * time.Millisecond, true},
		{"granted counts as free", 2, []any{"OK", int64(500), int64(200)}, 201 * time.Millisecond, true},
		{"piloted: one told", 3, []any{nil, int64(40), nil, nil, nil}, 41 * time.Millisecond, true},
		{"unknown and hostile ignored", 2, []any{int64(-1), int64(-3), int64(1 << 62), int64(70)}, 71 * time.Millisecond, true},
		{"only hostile", 1, []any{int64(-9), int64(maxHint.Milliseconds() + 1)}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &round{freeAt: make([]atomic.Int64, len(tc.answers))}
			now := time.Now()
			for i, a := range tc.answers {
				switch a := a.(type) {
				case int64:
					r.noteFree(i, a, true)
				case string:
					r.noteFree(i, 0, false)
				}
			}
			got, ok := r.freeIn(tc.quorum, now)
			if ok != tc.ok {
				t.Fatalf("told = %v, want %v", ok, tc.ok)
			}
			// noteFree reads the clock after now: allow for that.
			if ok && (got < tc.want || got > tc.want+50*time.Millisecond) {
				t.Errorf("free in %v, want %v", got, tc.want)
			}
		})
	}
	var none *round
	if _, ok := none.freeIn(1, time.Now()); ok {
		t.Error("a round that never started told a moment")
	}
}

// A hint only shortens the waiter's delay, never below the floor, and the
// floor doubles with each hinted attempt refused again, up to the
// backoff's ceiling: a master that keeps answering a TTL of 0 cannot make
// a waiter spin, nor one answering a huge TTL make it sleep longer.
func TestExpiry_hintShortensTheDelayWithinBounds(t *testing.T) {
	lc := &lockConfig{backoffMin: 5 * time.Millisecond, backoffMax: 250 * time.Millisecond}
	const delay = 2 * time.Second
	if d, h := hinted(nil, delay, 0, false, hintFloor(lc, 0)); d != delay || h {
		t.Errorf("no hint: %v, %v", d, h)
	}
	if d, h := hinted(nil, delay, time.Hour, true, hintFloor(lc, 0)); d != delay || h {
		t.Errorf("a hint past the delay: %v, %v", d, h)
	}
	if d, h := hinted(nil, delay, 100*time.Millisecond, true, hintFloor(lc, 0)); !h || d < 100*time.Millisecond || d > 100*time.Millisecond+waker.WakeSpread {
		t.Errorf("a hint of 100ms: %v, %v", d, h)
	}
	var prev time.Duration
	for hints := 0; hints < 40; hints++ {
		f := hintFloor(lc, hints)
		d, _ := hinted(nil, delay, 0, true, f)
		if d < f || d < minBackoff || d > lc.backoffMax+waker.WakeSpread {
			t.Fatalf("after %d refused hints: delay %v (floor %v)", hints, d, f)
		}
		if f < prev {
			t.Fatalf("after %d refused hints the floor fell: %v < %v", hints, f, prev)
		}
		prev = f
	}
	if prev != lc.backoffMax {
		t.Errorf("the floor ends at %v, want the backoff's ceiling %v", prev, lc.backoffMax)
	}
}
