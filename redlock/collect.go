package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/internal/ident"
	"github.com/quorumlock/quorumlock/internal/stall"
)

// tally counts a round's replies.
type tally struct {
	yes, no, fail int
	// free counts, of a release's no, those that are final (round.final):
	// with yes, the masters known not to hold the token afterwards.
	free    int
	final   func(i int) bool
	skip    int    // not asked (voteSkip)
	votes   []vote // by master; 0 while it has not answered
	refused []int
	errs    []error
	// wrongKind holds the *NodeError of each of refused that refused
	// because its copy of the key is a lock of another kind.
	wrongKind []error
	ctxErr    error

	// gate counts the grants of an acquisition or extension while some
	// master is not identified (ident.Gate); nil otherwise. Then yes
	// counts the grants that count, pending those that may once the first
	// probe ended or their master's probe in flight answered, lost those
	// that never will in this round, and probing holds the outcome open
	// until the first probe ended (recount). granted is, by master,
	// whether its vote is voteYes: what gate counts; nil without gate.
	gate          *ident.Gate
	granted       []bool
	pending, lost int
	probing       bool
	// uncounted are the masters whose grant did not count when the
	// acquisition was decided, for its error.
	uncounted []int
}

// ok reports whether a quorum agreed: granted or extended it, or for a
// release are known not to hold the token afterwards (yes and free).
func (t *tally) ok(quorum int) bool { return t.yes+t.free >= quorum && !t.probing }

// open reports whether the outcome of a round on n masters is still
// unknown: neither a quorum agreed (ok) nor so many no and failures that
// a quorum of yes is impossible.
func (t *tally) open(quorum, n int) bool {
	return !t.ok(quorum) && t.no+t.fail+t.skip+t.lost <= n-quorum
}

// mayCount reports whether the round, short of a quorum, waits for a
// probe: the first one, or one in flight to a master whose grant is
// pending, and the grants, counted or pending, could make a quorum then.
func (t *tally) mayCount(quorum int) bool {
	return !t.ok(quorum) && (t.probing || t.pending > 0) && t.yes+t.pending+t.free >= quorum
}

// identities is closed when a probe in flight to a master whose grant is
// pending has answered, or nil when no grant waits for one.
func (t *tally) identities() <-chan struct{} {
	if t.gate == nil || t.pending == 0 {
		return nil
	}
	return t.gate.News()
}

// recount counts the grants by the identities known now (ident.Gate.Count).
func (t *tally) recount() {
	t.yes, t.pending, t.lost, t.probing = t.gate.Count(t.granted)
}

func (t *tally) add(rp reply) {
	t.votes[rp.index] = rp.vote
	if t.granted != nil {
		t.granted[rp.index] = rp.vote == voteYes
	}
	switch rp.vote {
	case voteYes:
		if t.gate != nil {
			t.recount()
			break
		}
		t.yes++
	case voteNo:
		t.no++
		t.refused = append(t.refused, rp.index)
		if rp.err != nil {
			t.wrongKind = append(t.wrongKind, rp.err)
		}
		if t.final != nil && t.final(rp.index) {
			t.free++
		}
	case voteSkip:
		t.skip++
	default:
		t.fail++
		t.errs = append(t.errs, rp.err)
	}
}

// collect gathers replies until the outcome is known: a quorum of yes, or
// so many no and failures that a quorum is impossible. It waits the
// per-master timeout, never past ctx, and never for the masters it does
// not need. At the timeout, a master that did not answer counts as failed
// unless this process, not the master, is why its answer was not read
// (overdue): then collect waits on, up to one more per-master timeout
// from when the timer fired, and as long again as each later firing was
// late (a process that keeps stalling), but never past lateBound. That
// wait lasts only while it has a reason: a reply read during it asks
// overdue again, and once every master still unanswered has been silent
// for the whole timeout (and the readers' time after a late timer is
// over), those masters count as failed then, not at the wait's end — a
// hung master fails at the timeout however late another master's reader
// was.
func (c *Client) collect(ctx context.Context, r *round) tally {
	n := len(c.masters)
	t := tally{votes: make([]vote, n), final: r.final}
	var probed <-chan struct{}  // the first probe's end, while a grant may wait for it
	var closing <-chan struct{} // Close, while the round waits for the first probe
	if r.op == opAcquire || r.op == opExtend {
		if t.gate = c.ident.Gate(); t.gate != nil {
			t.granted = make([]bool, n)
			t.recount()
			probed = t.gate.First()
		}
	}
	if probed != nil {
		closing = c.closing
	}
	// A caller that waited for its own reply in Send (Command.Wait) until
	// the round's deadline comes here with the deadline passed: its wait
	// is over, and it does not wait as long again (a reply read later is
	// late, its grant rolled back); patience still applies.
	wait := r.wait
	if c.realClock && !time.Now().Before(r.deadline) {
		wait = 0
	}
	waited := r.wait // the round's wait, raised when the bound rose meanwhile
	timer := c.clock.NewTimer(wait)
	defer func() { timer.Stop() }()
	now := c.clock.Now()
	due := now.Add(wait)
	p := c.patience(due)
	// A grant waits for its master's probe no longer than the round waits
	// for any master, nor past the lock's validity (awaitProbe). An
	// extension waits no longer than its own wait: the lock it extends
	// may run out sooner, and a holder told ErrNotExtended in time can
	// still try again before then.
	probeBy := p.Bound
	if ttl := time.Duration(r.ttlMS) * time.Millisecond; t.gate != nil && now.Add(ttl-c.drift(ttl)).Before(probeBy) {
		probeBy = now.Add(ttl - c.drift(ttl))
	}
	if r.op == opExtend && due.Before(probeBy) {
		probeBy = due
	}
	c.stalls.Rounds.Enter()
	defer c.stalls.Rounds.Leave()
	var last time.Time // the latest an overdue wait may end: set when the timer first fires
	var hold time.Time // the end of the readers' time after a late timer (stall.Patience.Late)
	for t.open(c.quorum, n) {
		select {
		case rp := <-r.replies:
			t.add(rp)
			if !last.IsZero() && t.open(c.quorum, n) {
				// An overdue wait: this reply may have been what it
				// waited for.
				now := c.clock.Now()
				if c.overdue(&t, p, hold.Sub(now), now, last) == 0 {
					c.timedOut(&t, r, waited)
					c.awaitProbe(ctx, &t, probeBy)
					return t
				}
			}
		case <-probed:
			probed, closing = nil, nil
			t.recount()
		case <-t.identities():
			t.recount()
		case <-closing:
			// Close stops the probe (which may be held up sending to a
			// hung master): nothing more is identified, and the round
			// ends undecided (t.probing), failing with ErrClosed.
			c.ident.MarkStopped()
			return t
		case <-timer.C():
			// Count the replies that arrived with the timer first.
			for drained := false; !drained; {
				select {
				case rp := <-r.replies:
					t.add(rp)
				default:
					drained = true
				}
			}
			now := c.clock.Now()
			lateBy := now.Sub(due)
			late := c.realClock && lateBy > time.Millisecond
			if late {
				c.stalls.Note(due, now)
			}
			if last.IsZero() && wait > 0 && t.open(c.quorum, n) {
				// Answers read while the round waited may have raised
				// the bound: the round waits on to its start and the
				// bound as it is now (boundRisen).
				if b, more := c.boundRisen(r, waited, now); more > 0 {
					waited, due = b, now.Add(more)
					timer = c.clock.NewTimer(more)
					continue
				}
			}
			switch {
			case last.IsZero():
				// One more timeout from when this goroutine ran again,
				// however late: a process that did not run for longer
				// than the timeout gave its readers no chance either.
				last = p.First(now)
			case late:
				// Nor did one that stopped again before they ran: the
				// time it lost is added (not a whole timeout, so that a
				// process always a little late does not wait on a hung
				// master much longer than a timeout).
				last = last.Add(lateBy)
			}
			if last.After(p.Bound) {
				last = p.Bound
			}
			allow := p.Late(lateBy)
			hold = now.Add(allow)
			if more := c.overdue(&t, p, allow, now, last); t.open(c.quorum, n) && more > 0 {
				due = now.Add(more)
				timer = c.clock.NewTimer(more)
				continue
			}
			c.timedOut(&t, r, waited)
			c.awaitProbe(ctx, &t, probeBy)
			return t
		case <-ctx.Done():
			t.ctxErr = ctx.Err()
			return t
		}
	}
	return t
}

// awaitProbe waits, when the round stopped waiting for its masters, for
// the probes its grants wait for while they could make a quorum
// (tally.mayCount): the first probe to end, and the INFO in flight to a
// master that granted to be answered. It counts the grants at each
// answer, and waits never past ctx, Close, nor by (the round's bound, or
// the end of the validity the lock could have, if sooner); then the
// grants still pending count for nothing. The first probe started
// before the round, so waiting for it adds at most ident.ProbeGrace; a master
// that granted answers, so its INFO in flight is what a busy process has
// not read yet, and this waits for it only as long as for a reply.
func (c *Client) awaitProbe(ctx context.Context, t *tally, by time.Time) {
	if !t.mayCount(c.quorum) {
		return
	}
	timer := c.clock.NewTimer(by.Sub(c.clock.Now()))
	defer timer.Stop()
	for t.mayCount(c.quorum) {
		select {
		case <-t.gate.First():
			t.recount()
		case <-t.identities():
			t.recount()
		case <-timer.C():
			t.gate.StopWaiting()
			t.recount()
			return
		case <-ctx.Done():
			t.ctxErr = ctx.Err()
			return
		case <-c.closing:
			// As in collect: the round ends undecided or short, and the
			// attempt fails with ErrClosed.
			c.ident.MarkStopped()
			return
		}
	}
}

// timedOut counts the masters that have not answered as failed when
// collect stops waiting for them, after waited (the round's wait, or the
// bound it rose to) — or as not asked: a led leg the lead's answer was
// not read in time for.
func (c *Client) timedOut(t *tally, r *round, waited time.Duration) {
	for i, v := range t.votes {
		switch {
		case v != 0:
		case r.unsentLed(i):
			// Not asked: the lead's answer was not read in time (it
			// counts as failed), so neither was this.
			t.votes[i] = voteSkip
			t.skip++
		default:
			t.fail++
			t.errs = append(t.errs, c.nodeErrorIn(&c.masters[i], context.DeadlineExceeded, waited))
		}
	}
}

// overdue is asked by collect when the per-master timeout ends with
// masters unanswered, and again at each reply read while it waits on: how
// much longer to wait for them by the round's patience p, or 0 to count
// them as failed now. The wait never goes past last; allow is what is
// left at now of the readers' time after a late timer (stall.Patience.Late; 0
// or less: none).
func (c *Client) overdue(t *tally, p stall.Patience, allow time.Duration, now, last time.Time) time.Duration {
	var silences []time.Duration
	for i, v := range t.votes {
		if v != 0 {
			continue
		}
		if s, ok := c.masters[i].t.(Silencer); ok {
			silences = append(silences, s.Silence())
		}
	}
	return p.More(now, last, allow, silences...)
}

// patience returns the rule (stall.Patience) of a round whose commands
// are waited for until deadline (on whichever clock the caller measures
// it): for collect, and for leg.expire.
func (c *Client) patience(deadline time.Time) stall.Patience {
	return stall.NewPatience(c.timeout, deadline)
}

// quorumError describes a round that did not succeed.
func (c *Client) quorumError(t tally, r *round, sentinel error, noValidity bool) *QuorumError {
	qe := &QuorumError{
		Op: r.op.String(), Key: r.key, Masters: len(c.masters), Quorum: c.quorum,
		Succeeded: t.yes + t.free, Refused: t.refused, NoValidity: noValidity,
		sentinel: sentinel, ctxErr: t.ctxErr, addrs: c.addrs,
	}
	qe.uncounted = t.uncounted
	if w := r.writerWaits.Load(); w != 0 {
		for _, i := range t.refused {
			if i < 64 && w&(1<<i) != 0 {
				qe.WriterWaiting = append(qe.WriterWaiting, i)
			}
		}
	}
	if len(t.errs) > 0 {
		qe.Failed = multierror.Append(nil, t.errs...)
	}
	if len(t.wrongKind) > 0 {
		qe.WrongKind = multierror.Append(nil, t.wrongKind...)
	}
	for i, v := range t.votes {
		switch {
		case v == voteSkip || v == 0 && r.unsentLed(i):
			// Not asked, or about to be told not to be: the round was
			// settled on the lead's answer before this leg heard it.
			qe.NotAsked = append(qe.NotAsked, i)
		case v == 0 && !failedAt(t.errs, i):
			qe.Unanswered = append(qe.Unanswered, i)
		}
	}
	return qe
}

// failedAt reports whether errs hold master i's *NodeError.
func failedAt(errs []error, i int) bool {
	for _, err := range errs {
		if ne := (*NodeError)(nil); errors.As(err, &ne) && ne.Index == i {
			return true
		}
	}
	return false
}
