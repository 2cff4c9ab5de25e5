package finish

import (
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/event"
	"github.com/quorumlock/quorumlock/transport"
)

// send sends e through its master's transport (Host.Send), bounded by a
// per-master timeout; the reply is handled wherever the transport
// completes it. On a transport that is not Ordered, a later round of a
// reentrant owner waits for it (Round.WaitAfter).
func (f *Finisher) send(e *entry) {
	s := &send{f: f, e: e}
	e.job.Fill(e.i, &s.cmd)
	s.cmd.To, s.cmd.Deadline = s, time.Now().Add(f.timeout)
	f.gate.Lock()
	rf := e.round
	if rf.superseded.Load() {
		f.gate.Unlock()
		f.ended(e, nil, true, false)
		f.host.WorkerDone()
		return
	}
	if !f.ordered[e.i] {
		if rf.busy == nil {
			rf.busy = make([]atomic.Pointer[event.Event], len(f.masters))
		}
		s.busy = new(event.Event)
		rf.busy[e.i].Store(s.busy)
	}
	f.mu.Lock()
	if f.sent == nil {
		f.sent = make(map[*send]struct{})
	}
	f.sent[s] = struct{}{}
	f.mu.Unlock()
	f.host.Send(e.i, &s.cmd)
	f.gate.Unlock()
}

// Unanswered returns the retries sent and not yet completed, for a
// client whose transports did not complete them by their Close to
// complete them itself (a second completion is ignored).
func (f *Finisher) Unanswered() []transport.Completer {
	f.mu.Lock()
	defer f.mu.Unlock()
	var dst []transport.Completer
	for s := range f.sent {
		dst = append(dst, s)
	}
	return dst
}

// send is one send of a retry: its command, which the transport
// completes.
type send struct {
	cmd  transport.Command
	f    *Finisher
	e    *entry
	busy *event.Event // the retry in flight, on a transport that is not Ordered
	// completed: a second completion is ignored.
	completed atomic.Bool
}

// Complete hands the transport's outcome of the retry to its job
// (Job.Decode) and ends this send (transport.Completer); a second
// completion is ignored.
func (s *send) Complete(res any, err error, _ transport.SendInfo) {
	if s.completed.Swap(true) {
		return
	}
	f := s.f
	f.mu.Lock()
	delete(f.sent, s)
	f.mu.Unlock()
	e := s.e
	if s.busy != nil {
		e.round.busy[e.i].CompareAndSwap(s.busy, nil)
		s.busy.Fire()
	}
	again, err := e.job.Decode(e.i, e.confirm, res, err)
	f.ended(e, err, false, again)
	f.host.WorkerDone()
}
