package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/transport"
)

// answer turns master i's outcome of op (w) into its vote: the one
// reading of a transport's outcome, for a round's commands, its rollbacks
// and the finisher's retries. A failure queues a retry of a release or a
// rollback (finish.go). A command the transport re-sent after the master
// closed the connection may have run at the first try: SET NX then finds
// our own key, a release or a rollback nothing to delete, so a refusal
// counts as unknown (an extension is idempotent).
func (r *round) answer(i int, op opKind, w *wireCmd, res any, err error, info SendInfo) (vote, error) {
	v, err := r.decode(i, op, w.want, res, err)
	failed := err != nil && v == voteFail // not a refusal that says why (ErrWrongKind)
	if failed {
		r.c.failedAt[i].Store(time.Now().UnixNano())
	}
	if failed && !info.Sent && op == opAcquire {
		r.fin.MarkUnsent(i)
	}
	if failed && finishes(op, r) {
		r.c.finishLater(r, i, op, err)
	}
	if info.Resent && err == nil && v == voteNo && op != opExtend {
		v, err = voteFail, fmt.Errorf("%s retried after a broken connection: the first try may have run", op)
	}
	return v, err
}

// decode turns master i's reply to op, which must fit want, into its vote;
// a fenced acquisition's counter goes to r.counters[i].
func (r *round) decode(i int, op opKind, want expect, res any, err error) (vote, error) {
	if err != nil {
		if re := ReplyError(""); errors.As(err, &re) {
			err = scripts.Explain(re, string(re)) // the master's reply, as every transport reports it
		}
		if errors.Is(err, ErrWrongKind) {
			// The master's copy of the key is a lock of another kind:
			// this token is not there, and cannot get there while it
			// is. A refusal, not a failure: nothing to undo or retry.
			// A rollback that meets it found nothing, as one that
			// finds the key absent: the acquisition it undoes may
			// still be waiting in the master's buffers if it went
			// unanswered, and run once the other kind's key is gone,
			// so it is confirmed as such a rollback is (confirmLater),
			// not taken for final.
			if op == opRollback {
				return voteNo, nil
			}
			return voteNo, err
		}
		return voteFail, err
	}
	if !want.fits(res) {
		return voteFail, &fault.DesyncError{Cmd: op.String(), Reply: fault.Describe(res)}
	}
	if want == expectTTL {
		left, refused := res.(int64)
		r.noteFree(i, left, refused)
		if refused {
			return voteNo, nil
		}
		return voteYes, nil
	}
	switch {
	case res == nil || res == int64(0):
		return voteNo, nil
	case res == int64(2): // only expectRW fits it
		if op != opAcquire || i >= 64 {
			return voteFail, &fault.DesyncError{Cmd: op.String(), Reply: fault.Describe(res)}
		}
		setBit(&r.writerWaits, i) // a refusal, for a waiting writer
		return voteNo, nil
	case want == expectCounter:
		n, perr := strconv.ParseUint(string(res.([]byte)), 10, 64)
		if perr != nil || n >= maxFence || r.counters == nil {
			return voteFail, fmt.Errorf("fencing counter %s out of range", fault.Describe(res))
		}
		r.counters[i] = n
	}
	return voteYes, nil
}

// nodeError names the master and turns the many shapes of a timeout into
// ErrMasterTimeout, so that errors.Is(err, context.DeadlineExceeded) stays
// true only when the caller's own context expired.
func (c *Client) nodeError(m *master, err error) *NodeError {
	return c.nodeErrorIn(m, err, c.timeout)
}

// nodeErrorIn is nodeError for a command that was waited for wait (a
// release's is longer than the per-master timeout), which a timeout's
// message states.
func (c *Client) nodeErrorIn(m *master, err error, wait time.Duration) *NodeError {
	// err itself, not what it wraps: a NodeError held inside another
	// failure (the cause of a notTriedError) names an earlier failure.
	if ne, ok := err.(*NodeError); ok && ne.Index == m.index { //nolint:errorlint // see above
		return ne // named already: naming it again would say the master twice
	}
	if ns := (*transport.NotSentError)(nil); errors.As(err, &ns) {
		err = &notTriedError{since: ns.Since, why: ns.Why, cause: ns.Err}
	}
	if nt := (*notTriedError)(nil); errors.As(err, &nt) {
		// Failed at once, unsent: say so, not "did not answer in time".
		return &NodeError{Index: m.index, Addr: m.addr, Err: nt.named(m.redact(nt.cause), time.Now())}
	}
	err = m.redact(err)
	var ne net.Error
	if !errors.Is(err, ErrMasterTimeout) && (errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())) {
		// The cause's text without its own "redlock: ": one prefix in all.
		err = fmt.Errorf("%w (%v): %s", ErrMasterTimeout, wait, trimPrefix(err.Error()))
	}
	return &NodeError{Index: m.index, Addr: m.addr, Err: err}
}
