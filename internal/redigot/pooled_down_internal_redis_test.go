package redigot

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/transport"
)

// pooledOutcome is what became of a command pooledSend sent, and when.
type pooledOutcome struct {
	err  error
	info transport.SendInfo
	at   time.Time
}

// pooledSend sends a SET of key on p (an acquisition, DropWhenDown, when
// drop) with a deadline timeout from now, and returns its outcome's
// channel.
func pooledSend(p *pooledTransport, key string, drop bool, timeout time.Duration) <-chan pooledOutcome {
	done := make(chan pooledOutcome, 1)
	cmd := &transport.Command{Name: "SET", Args: []any{key, "v", "PX", "60000"}, Reply: transport.ReplySet,
		Deadline: time.Now().Add(timeout), DropWhenDown: drop}
	cmd.Done = func(_ any, err error, info transport.SendInfo) { done <- pooledOutcome{err, info, time.Now()} }
	p.Send(cmd)
	return done
}

// The pooled transport fails an acquisition at once, unsent, while its
// master is down — commands to it in flight and none answered for over
// the per-master timeout — and sends everything else; it is up again as
// soon as the master answers, and a command left unanswered before an
// idle spell does not make it down for the commands sent together next.
func TestPooled_acquisitionToADownMasterFailsUnsent(t *testing.T) {
	redistest.SkipShort(t)
	const timeout = 50 * time.Millisecond
	s := redistest.StartOne(t)
	pl := s.Pool()
	p := newPooled(s.Addr(), pl, nil, timeout, stall.New(clock.Real()))
	defer p.Close()
	if o := <-pooledSend(p, "pooled:down:warm", true, timeout); o.err != nil {
		t.Fatal(o.err)
	}
	paused(t, s)
	first := pooledSend(p, "pooled:down:1", true, timeout)
	time.Sleep(2 * timeout) // the subject: the master silent past the per-master timeout
	sent := time.Now()
	o := <-pooledSend(p, "pooled:down:2", true, timeout)
	var ns *transport.NotSentError
	if !errors.As(o.err, &ns) || !ns.Timeout() || o.info.Sent || o.at.Sub(sent) > timeout/2 {
		t.Fatalf("an acquisition to a master silent for %v: err %v, sent %v, after %v; want a timeout's NotSentError at once, unsent", 2*timeout, o.err, o.info.Sent, o.at.Sub(sent))
	}
	if !strings.Contains(o.err.Error(), "known down since") {
		t.Errorf("message %q does not say the master was known down", o.err)
	}
	release := pooledSend(p, "pooled:down:3", false, timeout)
	select {
	case o := <-release:
		t.Fatalf("a command not worthless late completed while its master was stopped: %v (sent %v)", o.err, o.info.Sent)
	case <-time.After(timeout / 2):
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	<-first
	<-release
	// Every command in flight has ended, their master silent until the
	// end: after an idle spell, two acquisitions sent together both go.
	time.Sleep(3 * timeout) // the subject: an idle spell, nothing in flight
	a, b := pooledSend(p, "pooled:down:4", true, timeout), pooledSend(p, "pooled:down:5", true, timeout)
	for _, ch := range []<-chan pooledOutcome{a, b} {
		if o := <-ch; o.err != nil || !o.info.Sent {
			t.Errorf("an acquisition after the master resumed and an idle spell: err %v, sent %v; want it sent and answered", o.err, o.info.Sent)
		}
	}
}
