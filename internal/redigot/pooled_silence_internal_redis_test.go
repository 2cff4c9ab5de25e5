package redigot

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/transport"
)

// A master that answers one command while another awaits its reply, and
// then answers nothing, is silent from that answer on: the command still
// awaited counts. (A reply ends the silence only of the commands sent
// before it; those in flight start waiting afresh from it.) With every
// master of a Client stopped, a master whose last answer came just after
// the stop is otherwise never silent, and the others are judged down
// against it, beyond the host's silence.
func TestPooled_answerWhileAnotherAwaitsRestartsTheSilence(t *testing.T) {
	redistest.SkipShort(t)
	const timeout = 50 * time.Millisecond
	s := redistest.StartOne(t)
	p := newPooled(s.Addr(), s.Pool(), nil, timeout, stall.New(clock.Real()))
	defer p.Close()
	// A command the master holds unanswered: BLPOP of an empty list,
	// read until its deadline.
	blocked := make(chan struct{})
	held := &transport.Command{Name: "BLPOP", Args: []any{"pooled:silence:empty", 0}, Reply: transport.ReplySet,
		Deadline: time.Now().Add(2 * time.Second)}
	held.Done = func(any, error, transport.SendInfo) { close(blocked) }
	p.Send(held)
	if !redistest.Within(2*time.Second, func() bool { return p.Silence() > 0 }) {
		t.Fatal("the held command was never sent")
	}
	// The master answers another command, sent after the held one.
	if o := <-pooledSend(p, "pooled:silence:answered", false, time.Second); o.err != nil {
		t.Fatal(o.err)
	}
	paused(t, s)
	if !redistest.Within(time.Second, func() bool { return p.Silence() >= 2*timeout }) {
		t.Fatalf("silence %v, a second after the master's last answer with a command still awaited", p.Silence())
	}
	if err := p.Down(); err == nil {
		t.Errorf("not down: silent for %v with a command awaited", p.Silence())
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	<-blocked
}
