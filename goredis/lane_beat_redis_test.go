package goredis

import (
	"testing"
	"time"
)

// Once every command was answered, the watchdog stops beating: a lane
// whose commands have long deadlines (a Transport's command without one
// gets the client's ReadTimeout, 5 s by default) does not fire every 5 ms
// until they pass. (A timer left for a deadline far off is one firing,
// not a beat.)
func TestLane_beatStopsWhenNothingWaits(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	l := newTestLane(t, c)
	for i := 0; i < 3; i++ {
		r, ch := cmd(5*time.Second, "PING")
		l.send(r)
		if res := wait(t, ch); res.err != nil {
			t.Fatal(res.err)
		}
	}
	if !poll(2*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.timerAt.IsZero() || time.Until(l.timerAt) >= time.Second
	}) {
		t.Fatal("the watchdog still beats 2 s after every command was answered (deadlines 5 s away)")
	}
}
