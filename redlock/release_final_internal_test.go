package redlock

import (
	"context"
	"testing"
	"time"
)

// orderedHeld is a heldTransport that says it is Ordered.
type orderedHeld struct{ *heldTransport }

func (orderedHeld) Ordered() bool { return true }

// A master's answer to a release that it does not hold the token counts
// as final only where nothing of the lock can still put the token there:
// where the acquisition's command was answered there or certainly never
// sent; not where it failed unanswered (it may still run, late), on an
// Ordered transport too, whose order does not hold across a connection it
// gave up and dialled again.
func TestRelease_notHeldIsFinalOnlyWhereTheAcquisitionCannotRunLate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ordered bool
		res     any
		err     error
		info    SendInfo
		final   bool
	}{
		{"granted", false, "OK", nil, SendInfo{Sent: true}, true},
		{"refused", false, nil, nil, SendInfo{Sent: true}, true},
		{"failed unsent", false, nil, ErrClosed, SendInfo{}, true},
		{"unanswered", false, nil, context.DeadlineExceeded, SendInfo{Sent: true}, false},
		{"unanswered, Ordered", true, nil, context.DeadlineExceeded, SendInfo{Sent: true}, false},
		{"granted, Ordered", true, "OK", nil, SendInfo{Sent: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := []*heldTransport{{addr: "held:0"}, {addr: "held:1"}, {addr: "held:2"}}
			ts := make([]Transport, len(held))
			for i, h := range held {
				ts[i] = h
				if tc.ordered {
					ts[i] = orderedHeld{h}
				}
			}
			c, err := NewWithTransports(ts, WithTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			acq, err := c.startRound(context.Background(), opAcquire, "k", "tok", 10*time.Second, nil, plainKind{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			held[0].take(t).Complete(tc.res, tc.err, tc.info)
			for _, h := range held[1:] {
				h.take(t).Complete("OK", nil, SendInfo{Sent: true})
			}
			acq.decide(false)
			now := time.Now()
			l := newLock(c, acq, now, now.Add(10*time.Second), &lockConfig{ttl: 10 * time.Second})
			if got := l.finalNo(0); got != tc.final {
				t.Errorf("master 0's \"not held\" final: %v, want %v", got, tc.final)
			}
			if !l.finalNo(1) {
				t.Error("master 1 granted it: its \"not held\" is final")
			}
		})
	}
}
