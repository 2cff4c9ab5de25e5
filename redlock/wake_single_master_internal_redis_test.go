package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/waker"
)

// On a single master there is no pilot, but the woken waiters of every
// client race to it: a woken waiter with rivals in other clients waits the
// age-weighted delay (leadDelay) before its attempt, at least half of
// waker.WakeSpread for one that has just begun to wait, so that the client Redis
// tells first does not win every race.
func TestWake_singleMasterWokenWaiterWithRivalsWaitsAgeWeightedDelay(t *testing.T) {
	servers := redistest.Start(t, 1)
	c := leadClient(t, servers, true)
	wg := c.wait([]string{"k"}, waker.Mark{}, plainKind{})
	defer wg.Stop(false)
	c.waker.Notify("k", "rel-1/2", 0) // the notice says: two clients wait
	begun := time.Now()
	if lead := wg.Woken(context.Background(), "k", false, begun); lead != -1 {
		t.Fatalf("woken asks master %d first on a single master", lead)
	}
	if waited := time.Since(begun); waited < waker.WakeSpread/2 {
		t.Fatalf("woken waiter with rivals attempted after %v, want at least %v", waited, waker.WakeSpread/2)
	}
}
