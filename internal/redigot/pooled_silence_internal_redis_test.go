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
	blocked := answerWhileHeld(t, p, 2*time.Second)
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

// A master that answers one command while another awaits its reply, and
// then leaves a command sent after that answer unanswered, is still
// silent once nothing is in flight: the silence that began at the answer
// ends only with an answer, not with the end of commands it never
// answered. (As for a master whose silence began at a send: it is silent
// from its first unanswered command, whatever came and went unanswered
// since, so that the next command to it is read by one timeout's grace,
// and a round takes it for hung.)
func TestPooled_commandUnansweredAfterAnAnswerKeepsTheSilenceOnceNoneInFlight(t *testing.T) {
	redistest.SkipShort(t)
	const timeout = 50 * time.Millisecond
	s := redistest.StartOne(t)
	p := newPooled(s.Addr(), s.Pool(), nil, timeout, stall.New(clock.Real()))
	defer p.Close()
	heldDone := answerWhileHeld(t, p, 100*time.Millisecond)
	paused(t, s)
	// Sent after the answer, and never answered.
	sentAt := time.Now()
	if o := <-pooledSend(p, "pooled:silence:unanswered", false, timeout); o.err == nil {
		t.Fatal("answered by a paused master")
	}
	<-heldDone
	if !redistest.Within(2*time.Second, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.running == 0
	}) {
		t.Fatal("commands still in flight")
	}
	// Where the silence began, not its length: Silence leaves out what
	// of it this process did not run, and a busy machine stalls it.
	u := p.unheard.Load()
	if u == 0 {
		t.Fatalf("not silent, with a command sent %v ago left unanswered and no answer since", time.Since(sentAt))
	}
	if began := p.epoch.Add(time.Duration(u - 1)); began.After(sentAt) {
		t.Errorf("silence began %v after the unanswered command was sent", began.Sub(sentAt))
	}
}

// answerWhileHeld sends p's master a command it holds unanswered (BLPOP
// of an empty list, read until wait from now and past it as run reads),
// then another, answered while the first is in flight; it returns the
// channel closed when the held command completes.
func answerWhileHeld(t *testing.T, p *pooledTransport, wait time.Duration) <-chan struct{} {
	t.Helper()
	blocked := make(chan struct{})
	held := &transport.Command{Name: "BLPOP", Args: []any{"pooled:silence:empty", 0}, Reply: transport.ReplySet,
		Deadline: time.Now().Add(wait)}
	held.Done = func(any, error, transport.SendInfo) { close(blocked) }
	p.Send(held)
	if !redistest.Within(2*time.Second, func() bool { return p.Silence() > 0 }) {
		t.Fatal("the held command was never sent")
	}
	if o := <-pooledSend(p, "pooled:silence:answered", false, time.Second); o.err != nil {
		t.Fatal(o.err)
	}
	return blocked
}
