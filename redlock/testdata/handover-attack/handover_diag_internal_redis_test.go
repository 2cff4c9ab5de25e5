package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Diagnosis of TestAttack_contentionGaps: what the masters hold while
// the key goes unheld.
func TestAttackDiag_contentionGaps(t *testing.T) {
	servers := redistest.Start(t, 5)
	var h holds
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	type snap struct {
		at   time.Time
		vals []string
	}
	var snaps []snap
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(stop) {
			s := snap{at: time.Now()}
			for _, sv := range servers {
				v, err := redis.String(sv.Do("GET", "gaps"))
				if err != nil {
					v = "-"
				} else if !strings.HasPrefix(v, "h:") {
					v = "T" + v[:4]
				} else {
					v = v[:6]
				}
				lines, _ := redis.Strings(sv.Do("ZRANGE", lineKey("gaps"), 0, -1))
				for i := range lines {
					lines[i] = lines[i][:4]
				}
				s.vals = append(s.vals, v+"["+strings.Join(lines, ",")+"]")
			}
			snaps = append(snaps, s)
			time.Sleep(3 * time.Millisecond)
		}
	}()
	for ci := range 6 {
		c := handOverClient(t, servers, true, WithTimeout(100*time.Millisecond))
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					ctx, cancel := context.WithDeadline(context.Background(), stop)
					l, err := c.Acquire(ctx, "gaps", WithTTL(2*time.Second))
					cancel()
					if err != nil {
						continue
					}
					got := time.Now()
					time.Sleep(20 * time.Millisecond)
					h.add(hold{from: got, to: until(l, time.Now()), who: fmt.Sprintf("c%d g%d", ci, g), token: l.Token()})
					_ = l.Release(context.Background())
				}
			}()
		}
	}
	wg.Wait()
	hs := h.hs
	longest, idle := h.gaps()
	t.Logf("%d holds; longest gap %v, idle %.0f%%", len(hs), longest, 100*idle)
	// The longest gap.
	sortHolds(hs)
	end := hs[0].to
	var gf, gt time.Time
	for _, x := range hs[1:] {
		if x.from.Sub(end) == longest {
			gf, gt = end, x.from
		}
		if x.to.After(end) {
			end = x.to
		}
	}
	for _, s := range snaps {
		if s.at.After(gf.Add(-30*time.Millisecond)) && s.at.Before(gt.Add(10*time.Millisecond)) {
			t.Logf("%s %v", s.at.Format("05.000"), s.vals)
		}
	}
	t.Logf("gap from %s to %s", gf.Format("05.000"), gt.Format("05.000"))
}
