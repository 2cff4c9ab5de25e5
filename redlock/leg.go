package redlock

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/event"
	"github.com/quorumlock/quorumlock/internal/legstate"
	"github.com/quorumlock/quorumlock/observe"
)

// leg is one master's share of a round.
type leg struct {
	r   *round
	i   int
	cmd Command
	// answered fires once the master answered (or the leg gave up), done
	// once the leg has ended: its command answered, and for an
	// acquisition the round decided and the rollback, if any, answered.
	// Rounds chained after this one on a transport that is not Ordered
	// wait for them.
	answered, done event.Event
	// completed: the transport completed cmd. A transport that completes
	// a command twice breaks its contract; the second is ignored, never
	// a second vote.
	completed atomic.Bool

	// Under round.mu:
	state legstate.State // where it is in its life: changed by to only (internal/legstate)
	vote  vote           // its master's answer, or why there is none; 0 until known
	waits int            // in legstate.Waiting, the events it still waits for before it sends
	timer *time.Timer    // ends that wait past the round's deadline (expire)
	due   time.Time      // when timer is due
}

// to moves the leg on by e (under round.mu); it reports whether e may
// happen in the leg's state (else the leg stays as it was).
func (l *leg) to(e legstate.Event) bool {
	s, ok := legstate.Next(l.state, e)
	l.state = s
	return ok
}

// begin sends the leg's command, at once on an Ordered transport; on
// another, once the leg of the round it follows (prev) has ended (a fence
// commit: once its acquisition was answered there), the leg of the leave
// it follows too (leave, an acquisition that starts a chain) has ended and
// a retry of a superseded round still in flight there has ended
// (internal/finish), or gives up one per-master timeout after the round's
// deadline.
func (l *leg) begin(prev, leave *round) {
	r := l.r
	m := &r.c.masters[l.i]
	var waits []*event.Event
	if !m.ordered {
		if prev != nil {
			if r.op == opCommit {
				waits = append(waits, &prev.legs[l.i].answered)
			} else {
				waits = append(waits, &prev.legs[l.i].done)
			}
		}
		if leave != nil {
			waits = append(waits, &leave.legs[l.i].done)
		}
		if e := r.fin.WaitAfter(l.i); e != nil {
			waits = append(waits, e)
		}
	}
	if l.led() {
		waits = append(waits, &r.legs[r.ledBy-1].answered)
		if m.ordered {
			r.sentLed.Add(1)
		}
	}
	// What has fired already is not waited for: with nothing else to
	// wait for, the caller sends the leg here. Not a led leg: ready
	// decides whether it is asked at all, and counts it in sentLed.
	if !l.led() {
		waits = slices.DeleteFunc(waits, (*event.Event).Fired)
	}
	if len(waits) == 0 {
		l.send()
		return
	}
	// Sent later by whichever goroutine ends the wait, not by the caller
	// that waits for the reply: a transport must not read it there.
	l.cmd.Wait = nil
	// An acquisition, to a master that is down, is not sent (as a
	// transport that knows it down fails it unsent): it gives up now
	// rather than wait for a command that master leaves unanswered, while
	// its round could not decide without it (two grants, two refusals of
	// five), the key held meanwhile where it was granted. A led leg asks
	// once its lead granted (downLed): should the lead refuse, its master
	// is not asked, and not failed. An extension waits as before: its
	// round returns at a quorum, and its leg, sent once the command it
	// follows has ended, still extends the lock on that master.
	var dn Downer
	if d, ok := m.t.(Downer); ok && r.op == opAcquire && !m.ordered {
		dn = d
	}
	var down error
	if dn != nil && !l.led() {
		down = r.down(dn, m)
	}
	r.mu.Lock()
	l.to(legstate.EvWait)
	l.waits = len(waits)
	if down != nil {
		l.giveUpLocked()
	} else {
		// The round's patience past the deadline: on a busy process the
		// command it follows may have been answered in time and its
		// reader not have run yet.
		l.due = r.c.patience(r.deadline).First(r.deadline)
		l.timer = time.AfterFunc(time.Until(l.due), l.expire)
	}
	r.mu.Unlock()
	if down != nil {
		l.failDown(down)
	}
	for _, e := range waits {
		e.Then(l.ready)
	}
	if dn != nil && l.led() && len(waits) > 1 {
		// After ready: a leg that waited for the lead alone has been
		// sent (or not asked) by then.
		r.legs[r.ledBy-1].answered.Then(func() { l.downLed(dn) })
	}
}

// downLed gives a led leg up once its lead granted, when it still waits
// for an earlier command on its master and that master is down (begin).
func (l *leg) downLed(dn Downer) {
	r := l.r
	r.mu.Lock()
	wait := l.state == legstate.Waiting && r.legs[r.ledBy-1].granted()
	r.mu.Unlock()
	if !wait {
		return
	}
	down := r.down(dn, &r.c.masters[l.i])
	if down == nil {
		return
	}
	r.mu.Lock()
	if l.state != legstate.Waiting {
		r.mu.Unlock()
		return
	}
	l.giveUpLocked()
	l.timer.Stop()
	r.mu.Unlock()
	l.failDown(down)
}

// giveUpLocked gives the leg's wait up, unsent: its vote is a failure
// (under round.mu, in legstate.Waiting).
func (l *leg) giveUpLocked() {
	l.to(legstate.EvGiveUp)
	l.vote = voteFail
}

// failDown reports the vote of a leg that gave up, unsent, because its
// master is down (begin, downLed); it ends once what it waited for has
// (ready), as one that gave up at its timer (expire).
func (l *leg) failDown(down error) {
	r := l.r
	m := &r.c.masters[l.i]
	// A failure, as answer records one when the transport fails a
	// command unsent (the lead passes over a master failing lately).
	r.c.failedAt[l.i].Store(time.Now().UnixNano())
	err := r.c.nodeError(m, down)
	r.answered(l.i, r.op, voteFail, err)
	l.report(voteFail, err)
}

// ready ends one of the leg's waits; after the last, it sends its command
// or, when it gave up meanwhile, ends.
func (l *leg) ready() {
	r := l.r
	r.mu.Lock()
	l.waits--
	if l.waits > 0 {
		r.mu.Unlock()
		return
	}
	gaveUp := l.state == legstate.GaveUp
	if l.led() && r.c.masters[l.i].ordered {
		defer r.sentLed.Done() // sent, or ended unsent
	}
	if !gaveUp && l.led() && (r.decided && r.failed || !r.legs[r.ledBy-1].granted()) {
		// The lead did not grant it (or the round failed meanwhile):
		// this master is not asked. (A round that succeeded meanwhile,
		// on a quorum of the others answering before this leg was
		// readied, still asks it: the lock is held on every master.)
		l.to(legstate.EvSkip)
		l.vote = voteSkip
		l.timer.Stop()
		if r.seen != nil {
			r.seen[l.i] = observe.MasterResult{Index: l.i, Addr: r.c.masters[l.i].addr, Answer: observe.AnswerNotAsked}
		}
		r.mu.Unlock()
		l.report(voteSkip, nil)
		l.end()
		return
	}
	if !gaveUp {
		l.timer.Stop()
		hand := l.sendLocked()
		r.mu.Unlock()
		l.transmit(hand)
		return
	}
	l.to(legstate.EvWaitsOver)
	r.mu.Unlock()
	if finishes(r.op, r) {
		// A release that never went out is sent later.
		r.c.finishLater(r, l.i, r.op, l.errGaveUp())
	}
	l.end()
}

// expire gives up the leg's wait one per-master timeout past the round's
// deadline: the previous command on this master is still pending (the
// master is slow or hung). On a transport whose replies a goroutine of
// this process reads (Silencer), it waits on by the round's patience, as
// collect does: on a busy process the command it follows may have been
// answered in time and its reader not have run yet. Nothing was sent, so
// nothing needs undoing; the leg ends only after what it waited for, so the
// rounds chained after it still follow that.
func (l *leg) expire() {
	r := l.r
	r.mu.Lock()
	if l.state != legstate.Waiting {
		r.mu.Unlock()
		return
	}
	if s, ok := r.c.masters[l.i].t.(Silencer); ok {
		p, now := r.c.patience(r.deadline), time.Now()
		if more := p.More(now, p.Bound, p.Late(now.Sub(l.due)), s.Silence()); more > 0 {
			l.due = now.Add(more)
			l.timer.Reset(more)
			r.mu.Unlock()
			return
		}
	}
	l.giveUpLocked()
	r.mu.Unlock()
	err := l.errGaveUp()
	r.answered(l.i, r.op, voteFail, err)
	l.report(voteFail, err)
}

func (l *leg) errGaveUp() error {
	what := "an earlier command on this key"
	if l.led() {
		what = "it or the lead master's answer (master " + strconv.Itoa(l.r.ledBy-1) + ")"
	}
	return l.r.c.nodeError(&l.r.c.masters[l.i], fmt.Errorf("%s is still pending: %w", what, context.DeadlineExceeded))
}

// askedAt is when the leg's master was asked, as the adaptive bound
// counts its round trip: the round's start, or for a leg that waited for
// the lead master's grant, the lead's answer. From the round's start, a
// slow lead would make every master it leads look as slow as itself, and
// a single slow master would raise the bound for all.
func (l *leg) askedAt() time.Time {
	s := l.r.started()
	if l.led() {
		s = s.Add(time.Duration(l.r.leadAnswered.Load()) * time.Microsecond)
	}
	return s
}

// led reports whether the leg waits for its round's lead master.
func (l *leg) led() bool { return l.r.ledBy != 0 && l.i != l.r.ledBy-1 }

// unsentLed reports whether leg i waits for its round's lead master and
// has sent nothing.
func (r *round) unsentLed(i int) bool {
	if !r.legs[i].led() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.legs[i].state.SentOnce()
}

// placedNothingLocked reports whether the leg's command certainly put
// nothing on its master: refused there, not asked (a led leg), or never
// sent (under round.mu).
func (l *leg) placedNothingLocked() bool {
	return l.vote == voteNo || l.vote == voteSkip || l.state == legstate.GaveUp || l.state == legstate.EndedUnsent
}

// granted reports whether the leg's master granted it (under round.mu).
func (l *leg) granted() bool { return l.vote == voteYes }

// send sends the leg's command, unless Close gave up on the transports
// (Client.abandon): it then fails, unsent.
func (l *leg) send() {
	r := l.r
	r.mu.Lock()
	hand := l.sendLocked()
	r.mu.Unlock()
	l.transmit(hand)
}

// sendLocked moves the leg to sent (under round.mu); it reports whether
// the hand-over of its command is waited for: only an acquisition on an
// Ordered transport sends its rollback without waiting for the answer,
// and that rollback must not be handed over before the SET.
func (l *leg) sendLocked() (hand bool) {
	r := l.r
	if r.op == opAcquire && r.c.masters[l.i].ordered {
		l.to(legstate.EvHand)
		return true
	}
	l.to(legstate.EvSend)
	return false
}

// transmit hands the leg's command to its transport (send).
func (l *leg) transmit(hand bool) {
	r := l.r
	if r.c.abandoned.Load() {
		l.complete(nil, errAbandoned, SendInfo{})
	} else {
		r.c.masters[l.i].t.Send(&l.cmd)
	}
	if !hand {
		return
	}
	// A rollback decided meanwhile waited for the command to be handed
	// over (nextLocked): it goes now.
	r.mu.Lock()
	l.to(legstate.EvHanded)
	act := l.nextLocked()
	r.mu.Unlock()
	l.act(act)
}

// complete handles the master's answer to the leg's command. (A script's
// NOSCRIPT is the transport's: see muxConn.noScript.)
func (l *leg) complete(res any, err error, info SendInfo) {
	if l.completed.Swap(true) {
		return
	}
	r := l.r
	v, err := r.answer(l.i, r.op, &r.wireBuf, res, err, info)
	m := &r.c.masters[l.i]
	if err != nil {
		err = r.c.nodeErrorIn(m, err, r.wait)
	} else {
		now := time.Now()
		if r.ledBy == l.i+1 {
			r.leadAnswered.Store(int32(min(now.Sub(r.started()), math.MaxInt32*time.Microsecond) / time.Microsecond))
		}
		r.c.bound.Note(l.i, l.askedAt(), now)
	}
	r.answered(l.i, r.op, v, err)
	r.mu.Lock()
	l.to(legstate.EvAnswer)
	l.vote = v
	act := l.nextLocked()
	r.mu.Unlock()
	l.report(v, err)
	l.act(act)
}

// report hands the leg's vote to the round's collector (collect) and
// fires answered, once the master answered or the leg gave up.
func (l *leg) report(v vote, err error) {
	l.r.replies <- reply{index: l.i, vote: v, err: err}
	l.answered.Fire()
}

// legAct is what a leg does next, outside round.mu.
type legAct uint8

const (
	legWait     legAct = iota // for the answer or the decision
	legEnd                    // it has ended
	legRollback               // send the rollback, then end
)

// nextLocked says what the leg does next (the caller holds round.mu):
// every command but an acquisition ends at its answer. An acquisition
// ends at its answer and the decision, or, when the round failed, sends
// the rollback: on an Ordered transport at once (it runs after the SET),
// on another once the SET was answered (it cannot overtake it); not where
// the master refused (nothing to undo).
func (l *leg) nextLocked() legAct {
	r := l.r
	switch {
	case l.state == legstate.Answered && (r.op != opAcquire || l.vote == voteNo || r.decided && !r.failed):
		l.to(legstate.EvEnd)
		return legEnd
	case r.op == opAcquire && r.decided && r.failed &&
		(l.state == legstate.Answered || l.state == legstate.Sent && r.c.masters[l.i].ordered):
		// On an Ordered transport the rollback is queued behind the
		// SET, once the SET was handed to it (send): handed over first,
		// it would run first, find nothing, and the SET would stay.
		l.to(legstate.EvRollback)
		return legRollback
	}
	return legWait
}

func (l *leg) act(a legAct) {
	switch a {
	case legEnd:
		l.end()
	case legRollback:
		l.rollback()
	}
}

// end ends the leg (whoever calls it has moved it to an ended state,
// under round.mu):
// rounds chained after it on its master go on, and the last leg frees the
// round.
func (l *leg) end() {
	r := l.r
	l.done.Fire()
	if r.running.Add(-1) == 0 {
		r.forget()
	}
	r.c.workers.Done()
}

// silentFor reports whether the master has been silent for d (Silencer);
// false when its transport cannot tell.
func (m *master) silentFor(d time.Duration) bool {
	s, ok := m.t.(Silencer)
	return ok && s.Silence() >= d
}

// knownDown reports whether the master's transport knows it down now
// (Downer): it has left commands unanswered for longer than the
// per-master timeout.
func (m *master) knownDown() bool {
	d, ok := m.t.(Downer)
	return ok && d.Down() != nil
}

// down is why master m is down for the round's acquisition (dn.Down), or
// nil: a master is down for the round only once silent for longer than
// downAfter. One silent for less is only as slow as the others, not down.
func (r *round) down(dn Downer, m *master) error {
	err := dn.Down()
	if err == nil {
		return nil
	}
	if _, ok := m.t.(Silencer); ok && !m.silentFor(r.downAfter()) {
		return nil
	}
	return err
}

// downAfter is how long a master must have been silent to be down for the
// round's acquisition: the round's wait (the adaptive bound: when every
// master answers late of late, one silent for less than the wait is as
// slow as the others, stall.Bound), and as long again as every master of the
// client has been silent (hostSilence): a host so loaded that no master
// runs for a while silences them all together, and a master no more
// silent than that is not down but waiting for the host. One silent for
// longer than that still is, and so is a minority of hung masters while
// any master answers. See "A busy host is not a silent master: down is
// beyond the host" in docs/design.md.
func (r *round) downAfter() time.Duration {
	return r.wait + r.c.hostSilence()
}

// hostSilence is how long every master has been silent (Silencer): the
// least of their silences, a master whose transport cannot tell counting
// as not silent.
func (c *Client) hostSilence() time.Duration {
	var least time.Duration
	for i := range c.masters {
		sl, ok := c.masters[i].t.(Silencer)
		if !ok {
			return 0
		}
		s := sl.Silence()
		if s <= 0 {
			return 0
		}
		if i == 0 || s < least {
			least = s
		}
	}
	return least
}
