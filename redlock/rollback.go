package redlock

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/legstate"
)

// decide fixes the round's outcome. Each leg of a failed acquisition then
// rolls back its master's SET (see nextLocked); ended (legsEnded) tells
// when those of the masters that granted it are done.
func (r *round) decide(failed bool) {
	if failed && r.op == opAcquire {
		rb := new(wireCmd)
		r.wireInto(rb, opRollback, nil)
		r.rb = rb
	}
	acts := make([]legAct, len(r.legs))
	r.mu.Lock()
	if failed && r.op == opAcquire {
		r.rbq = make([]*rollbackReq, len(r.legs))
	}
	r.decided, r.failed = true, failed
	for i := range r.legs {
		acts[i] = r.legs[i].nextLocked()
	}
	r.mu.Unlock()
	for i, a := range acts {
		r.legs[i].act(a)
	}
}

// rollback undoes the leg's SET on its master, bounded by a per-master
// timeout of its own.
func (l *leg) rollback() {
	r := l.r
	q := &rollbackReq{l: l}
	r.rb.fill(&q.cmd, r)
	q.cmd.To, q.cmd.Deadline = q, time.Now().Add(r.c.timeout)
	r.mu.Lock()
	r.rbq[l.i] = q
	unanswered := l.vote == voteFail
	r.mu.Unlock()
	if r.c.abandoned.Load() {
		q.complete(nil, errAbandoned, SendInfo{})
		return
	}
	if unanswered {
		select {
		case <-r.c.closing:
			// The master never answered the SET and Close began: a
			// rollback would wait for it once more (a dial, a
			// handshake) past Close's bound. Should the SET ever run,
			// its key expires at its TTL, as Close drops locks.
			q.complete(nil, errClosingUnanswered, SendInfo{})
			return
		default:
		}
	}
	r.c.masters[l.i].t.Send(&q.cmd)
}

// errClosingUnanswered is the rollback not sent, at Close, to a master
// that never answered the SET it would undo.
var errClosingUnanswered = fmt.Errorf("%w: rollback not sent: the master never answered the acquisition, and the client is closing", ErrClosed)

// rollbackReq is one master's rollback of a failed acquisition.
type rollbackReq struct {
	cmd       Command
	l         *leg
	completed atomic.Bool // a second completion is ignored (see leg.completed)
}

func (q *rollbackReq) complete(res any, err error, info SendInfo) {
	if q.completed.Swap(true) {
		return
	}
	l := q.l
	r := l.r
	v, err := r.answer(l.i, opRollback, r.rb, res, err, info)
	if err != nil {
		err = r.c.nodeError(&r.c.masters[l.i], err)
	}
	r.answered(l.i, opRollback, v, err)
	r.mu.Lock()
	l.to(legstate.EvRolledBack)
	unknown := r.setUnansweredLocked(l.i)
	r.mu.Unlock()
	if err == nil && v == voteNo && unknown {
		r.c.confirmLater(r, l.i)
	}
	l.end()
}

// setUnanswered reports whether master i's acquisition failed without an
// answer, so that it may yet run there (see confirmLater).
func (r *round) setUnanswered(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.setUnansweredLocked(i)
}

// setUnansweredLocked is setUnanswered under round.mu.
func (r *round) setUnansweredLocked(i int) bool { return r.legs[i].vote == voteFail }

// legsEnded returns a channel that closes once the legs of the masters
// that voted yes in votes have ended (for a failed acquisition: rolled
// back).
func (r *round) legsEnded(votes []vote) <-chan struct{} {
	ch := make(chan struct{})
	var left atomic.Int32
	left.Store(1)
	for i, v := range votes {
		if v == voteYes {
			left.Add(1)
			r.legs[i].done.Then(func() {
				if left.Add(-1) == 0 {
					close(ch)
				}
			})
		}
	}
	if left.Add(-1) == 0 {
		close(ch)
	}
	return ch
}
