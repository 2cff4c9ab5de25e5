package redlock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/quorumlock/quorumlock/internal/finish"
	"github.com/quorumlock/quorumlock/internal/jitter"
)

// The retries of releases and rollbacks that a master did not confirm
// are scheduled by package internal/finish (its package documentation
// says how); this file is the core's side of it: which failures are
// retried, how a retry's command is built and its reply read (finJob),
// how it is sent (finishHost), and the warning when one is given up.

// initFinisher readies c.fin for c's masters.
func (c *Client) initFinisher() {
	ordered := make([]bool, len(c.masters))
	for i := range c.masters {
		ordered[i] = c.masters[i].ordered
	}
	c.fin.Init((*finishHost)(c), finish.Config{Ordered: ordered, Timeout: c.timeout, Closing: c.closing, Logger: c.logger})
}

// finishes reports whether op of r is finished when a master misses it: a
// rollback, or a release that frees the key (not a reentrant owner's
// partial release, which only sets its count).
func finishes(op opKind, r *round) bool {
	return op == opRollback || (op == opRelease && !r.k.partial())
}

// finishLater queues a retry of op of r on master i, which failed with
// err without an answer.
func (c *Client) finishLater(r *round, i int, op opKind, err error) {
	if op == opRollback && r.fin.UnsentAt(i) || r.nothingAt(i) {
		return // nothing to roll back or release there
	}
	c.fin.Retry(&finJob{c: c, r: r, op: op}, i, time.Duration(r.ttlMS)*time.Millisecond, err)
}

// confirmLater sends master i's rollback of r once more, the finisher's
// shortest backoff (20 ms) from now: the rollback found nothing to
// delete, yet the SET it undoes may still run there. That SET failed without an answer (a timeout, a
// connection the client gave up), so its bytes may wait in the master's
// buffers on a connection the client no longer reads — a master frozen
// (SIGSTOP) or busy — and run after a rollback that came in on another
// connection. A rollback sent after the master answered one has come
// through its event loop at least once since it ran again, and so after
// what it had already read (docs/design.md, "After a failed attempt").
func (c *Client) confirmLater(r *round, i int) {
	c.fin.Confirm(&finJob{c: c, r: r, op: opRollback}, i, time.Duration(r.ttlMS)*time.Millisecond)
}

// nothingAt reports whether r is a release of a lock none of whose rounds
// put its token on master i, as far as is known now. Not under the
// finisher's mu: it takes the rounds' mu.
func (r *round) nothingAt(i int) bool {
	ps := r.placers.Load()
	if ps == nil {
		return false
	}
	for _, p := range *ps {
		if !p.neverPlacedAt(i) {
			return false
		}
	}
	return true
}

// neverPlacedAt reports whether r, an acquisition or a reentrant owner's
// round taking the lock again, certainly did not put its token on master
// i: refused there, skipped (a led attempt), or never sent. Those
// outcomes are final.
func (r *round) neverPlacedAt(i int) bool {
	if r.fin.UnsentAt(i) {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.legs[i].placedNothingLocked()
}

// finishHost is the Client as its finisher's host (finish.Host).
type finishHost Client

// AddWorker counts a retry's goroutine or send in c.workers.
func (h *finishHost) AddWorker() bool { return (*Client)(h).addWorker() }

// WorkerDone ends what AddWorker counted.
func (h *finishHost) WorkerDone() { h.workers.Done() }

// Send sends a retry to master i, or fails it unsent once Close
// completed, itself, what the transports left unanswered (abandon).
func (h *finishHost) Send(i int, cmd *Command) {
	if h.abandoned.Load() {
		cmd.To.Complete(nil, errAbandoned, SendInfo{})
	} else {
		h.masters[i].t.Send(cmd)
	}
}

// Backoff draws the delay before a retry from the client's jitter.
func (h *finishHost) Backoff(floor, ceiling time.Duration, attempt int) time.Duration {
	return jitter.Backoff(h.jit, floor, ceiling, attempt)
}

// finJob is a retry of op of round r: its command and the reading of its
// reply (finish.Job).
type finJob struct {
	c  *Client
	r  *round
	op opKind
	w  *wireCmd // the latest send's command (Fill), read by Decode
}

// Round returns r's share of the finisher's state.
func (j *finJob) Round() *finish.Round { return &j.r.fin }

// NothingAt reports whether no round of the lock put its token on master
// i (round.nothingAt).
func (j *finJob) NothingAt(i int) bool { return j.r.nothingAt(i) }

// Fill builds the retry's command.
func (j *finJob) Fill(_ int, cmd *Command) {
	r := j.r
	w := new(wireCmd)
	r.wireInto(w, j.op, nil)
	w.fill(cmd, r)
	// As for the round's own command (wireCmd.fill), and never refused as
	// busy: what it undoes may still run.
	cmd.Undo, cmd.DropWhenDown = true, false
	j.w = w
}

// Decode reads master i's outcome of the retry.
func (j *finJob) Decode(i int, confirm bool, res any, err error) (again bool, _ error) {
	// Yes or no, the key is no longer ours there — except that a
	// rollback that found nothing may have overtaken the SET it undoes,
	// when that SET failed unanswered: it is confirmed once
	// (confirmLater). A SET that was answered has run, and cannot run
	// after this.
	v, err := j.r.decode(i, j.op, j.w.want, res, err)
	if v == voteNo {
		err = nil // a refusal that says why (ErrWrongKind) ends the retry too
	}
	again = err == nil && v == voteNo && j.op == opRollback && !confirm && j.r.setUnanswered(i)
	return again, err
}

// GaveUp logs the retry given up (logUnfinished).
func (j *finJob) GaveUp(i, tries int, err error, why string) {
	j.c.logUnfinished(j.r, i, j.op, tries, err, why)
}

// logUnfinished reports a retry of op of r on master i given up.
func (c *Client) logUnfinished(r *round, i int, op opKind, tries int, err error, why string) {
	if c.logger == nil || r.nothingAt(i) {
		return // a release of a lock that never reached the master leaves nothing there
	}
	m := &c.masters[i]
	// A master that keeps missing them is told once, with a count when it
	// answers again; the client's own limit is told each time (rare).
	perMaster := why != finish.TooManyRetries
	if perMaster && !c.health.FirstUnconfirmed(m.index) {
		return
	}
	attrs := []slog.Attr{slog.String("op", op.String()), slog.String("key", r.key),
		slog.Int("master", m.index), slog.String("addr", m.addr), slog.String("reason", why), slog.Int("tries", tries)}
	if err != nil {
		var ne *NodeError
		if !errors.As(err, &ne) {
			err = c.nodeError(m, err)
		}
		attrs = append(attrs, slog.Any("error", err))
	}
	if perMaster && c.health != nil {
		attrs = append(attrs, slog.String("note", "further ones for this master are counted, not logged, until it answers again"))
	}
	c.logger.LogAttrs(context.Background(), slog.LevelWarn,
		"redlock: a master did not confirm a release or rollback; the key may stay there until its TTL", attrs...)
}
