package wake

import (
	"fmt"
	"math/rand"
	"testing"
)

// hotKey runs k waiters of one client on a key that other clients keep
// taking: a release every period ticks (period ≥ 5), announced by five
// masters on five consecutive ticks in a random order (pilot 0, quorum
// 3), and every attempt of these waiters refused by the pilot, the only
// master it asks. A woken waiter begins its attempt on the next tick it
// is idle; the attempt lasts dur ticks. bracket: the attempts are told
// with Trying and Tried (nothing undone). It returns the attempts begun.
func hotKey(k, period, dur, releases int, bracket bool) int {
	var q Queue
	type waiter struct {
		w   *Waiter
		end int // the tick its attempt ends; 0: idle
	}
	ws := make([]*waiter, k)
	for i := range ws {
		ws[i] = &waiter{w: q.Add("k", make(chan struct{}, 1), Plain, 0)}
	}
	attempts := 0
	last := (releases+1)*period + 5
	for tick := 1; ; tick++ {
		for _, x := range ws {
			if x.end == tick {
				x.end = 0
				if bracket {
					q.Tried(x.w, false) // refused by the pilot: nothing undone
				}
			}
		}
		if r, off := tick/period, tick%period; r >= 1 && r <= releases && off < 5 {
			order := rand.New(rand.NewSource(int64(r))).Perm(5)
			q.Notify(fmt.Sprintf("rel%05d", r), order[off], 0, 3)
		}
		busy := false
		for _, x := range ws {
			if x.end == 0 && len(x.w.Ch) > 0 {
				<-x.w.Ch
				if bracket {
					q.Trying(x.w)
				}
				x.end = tick + dur
				attempts++
			}
			busy = busy || x.end != 0
		}
		if tick > last && !busy {
			return attempts
		}
	}
}

// Many waiters of one client on a key other clients keep taking: a
// notice that wakes one of them crosses the attempts of the others under
// way, but those, refused by the pilot, held nothing there that another
// attempt may have met, and wake nobody as they end. The client makes
// the attempts the notices alone call for, however many of its waiters
// wait and however the attempts overlap the releases.
func TestQueue_hotKeyRefusedAttemptsWakeNobody(t *testing.T) {
	for _, k := range []int{2, 5, 20, 100} {
		for _, pd := range [][2]int{{20, 5}, {10, 10}, {6, 12}, {6, 30}, {5, 60}} {
			period, dur := pd[0], pd[1]
			t.Run(fmt.Sprintf("k=%d,period=%d,dur=%d", k, period, dur), func(t *testing.T) {
				const releases = 200
				plain, bracketed := hotKey(k, period, dur, releases, false), hotKey(k, period, dur, releases, true)
				if bracketed != plain {
					t.Errorf("%d attempts for %d releases, %.2f a release; %d (%.2f) without the brackets",
						bracketed, releases, float64(bracketed)/releases, plain, float64(plain)/releases)
				}
			})
		}
	}
}
