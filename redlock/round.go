package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/transport"
)

// opKind is what a round asks of every master.
type opKind uint8

const (
	opAcquire  opKind = iota // SET key token NX PX ttl
	opExtend                 // compare-and-PEXPIRE
	opRelease                // compare-and-DEL, announced to waiters
	opRollback               // compare-and-DEL of a failed attempt, not announced
	opLeave                  // a fair waiter that gives up leaves the queue
	opWait                   // the wake-up subscription (for logs only)
	opCommit                 // a fenced acquisition raises the fencing counters
	opHeal                   // a held lock is put back where it was lost (heal.go)
)

func (o opKind) String() string {
	switch o {
	case opAcquire:
		return "acquire"
	case opExtend:
		return "extend"
	case opRelease:
		return "release"
	case opRollback:
		return "rollback"
	case opLeave:
		return "leave queue"
	case opCommit:
		return "commit fence"
	case opHeal:
		return "heal"
	default:
		return "wait"
	}
}

// vote is one master's answer in a round.
type vote uint8

const (
	voteYes  vote = iota + 1 // granted, extended or released
	voteNo                   // held by another token / not ours
	voteFail                 // error or timeout: the outcome on that master is unknown
	voteSkip                 // not asked: the round's lead master did not grant it (see round.ledBy)
)

type reply struct {
	index int
	vote  vote
	err   error
}

// round is one operation sent to every master in parallel, through each
// master's Transport, with no goroutine of its own: each master's share
// (a leg) moves on as its transport completes its commands. A leg sends
// its command at once on an Ordered transport; on another, it first waits
// for the round it follows on that master (chaining, see startRound). It
// reports the reply and — for an acquisition that failed — sends the
// rollback of its master's SET once the round is decided and, on a
// transport that is not Ordered, once that SET has been answered, so that
// a rollback can never overtake the SET it undoes.
type round struct {
	c     *Client
	op    opKind
	key   string
	token string
	ttlMS int64
	k     kind     // what the lock's rounds send (kind.go)
	fence *fencing // nil for a lock without fencing
	// counters[i] is master i's fencing counter, from a fenced
	// acquisition's reply; written before the reply is reported.
	counters []uint64
	// freeAt[i] is when (Unix ns, real time) master i's copy of the key is
	// expected to be free, from a waiting plain acquisition's reply (the
	// holder's remaining TTL), or 0 when unknown; nil for other rounds.
	// Set before the reply is reported, read by freeIn at any time.
	freeAt []atomic.Int64
	// writerWaits has bit i set when master i turned a reader away for a
	// waiting writer (and not a holder); set before the reply is reported.
	writerWaits atomic.Uint64
	chain       string    // the key in Client.chains this round is the newest of, or ""
	deadline    time.Time // when its commands stop being waited for
	// wait is how long its commands are waited for from its start: the
	// adaptive bound of an acquisition or an extension (bound.go), a
	// release's longer wait (Client.releaseWait), else the per-master
	// timeout.
	wait    time.Duration
	running atomic.Int32
	// leadAnswered is how long after the round's start its lead master
	// answered (µs), once it did: the other legs, sent only then, count
	// their round trips for the adaptive bound from that moment. (An
	// Int32 beside running, in what would be padding: an Int64 would
	// take round3 to the next size class.)
	leadAnswered atomic.Int32
	// ledBy is 1 + the index of the master an acquisition asks first,
	// or 0: the others are asked once it granted, and not at all when it
	// did not (a woken waiter's attempt, see Client.leadFor).
	ledBy int
	// sentLed counts the legs on Ordered transports that wait for the
	// lead and have neither been sent nor ended: an acquisition that
	// succeeded waits for it before it returns, so that no later command
	// of the holder (its release) reaches such a master before the SET.
	sentLed sync.WaitGroup

	// ctx is the caller's, for the logger and the observer only (never
	// for cancellation); seen, each master's answer for the observer
	// (observe.go), nil without one.
	ctx  context.Context
	seen []MasterResult

	replies chan reply

	// mu guards decided, failed, rbq and the legs' state. Lock order
	// (see Client.mu): a Lock's op may be held when it is taken
	// (Lock.finalNo), Client.mu and the finisher's locks never are; under
	// it only a transport's own lock is taken (its Silence, in expire).
	mu      sync.Mutex
	decided bool
	failed  bool
	legs    []leg

	// rb is a failed acquisition's rollback, built once it is decided;
	// rbq[i] is master i's rollback once sent (under mu), for Close to
	// complete it should the transport never do so (Client.abandon).
	rb  *wireCmd
	rbq []*rollbackReq

	// liveNext and livePrev link the rounds whose legs still run
	// (Client.live, under Client.mu).
	liveNext, livePrev *round

	// fin: retries of its release or rollback that a master missed
	// (finish.go).
	fin roundFin

	// final, for a release, reports whether master i's answer that it
	// does not hold the token is final: no command of the lock that puts
	// the token there can still run on it (Lock.finalNo). Nil for other
	// rounds. Set before the round is collected, read by collect only.
	final func(i int) bool

	// The round's command and its arguments, in the round's own
	// allocation (alloc.go).
	wireBuf wireCmd
	argBuf  [12]any
}

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
	answered, done event
	// completed: the transport completed cmd. A transport that completes
	// a command twice breaks its contract; the second is ignored, never
	// a second vote.
	completed atomic.Bool

	// Under round.mu:
	state legState    // where it is in its life: changed by to only (legstate.go)
	vote  vote        // its master's answer, or why there is none; 0 until known
	waits int         // in legWaiting, the events it still waits for before it sends
	timer *time.Timer // ends that wait past the round's deadline (expire)
	due   time.Time   // when timer is due
}

// event fires once; what waits for it runs then (on the goroutine that
// fires it), or at once when it already has. It is 24 bytes, two in every
// leg: what waits is a list, made by then.
type event struct {
	mu    sync.Mutex // a leaf: nothing is locked or run while it is held
	fired bool
	fns   *thenFn // the latest then first
}

// thenFn is one function waiting for an event.
type thenFn struct {
	f    func()
	next *thenFn
}

// then runs f when e fires (at once if it has).
func (e *event) then(f func()) {
	e.mu.Lock()
	if e.fired {
		e.mu.Unlock()
		f()
		return
	}
	e.fns = &thenFn{f: f, next: e.fns}
	e.mu.Unlock()
}

// fire fires e, once, and runs what waited for it, in the order then was
// called.
func (e *event) fire() {
	e.mu.Lock()
	if e.fired {
		e.mu.Unlock()
		return
	}
	e.fired = true
	fns := e.fns
	e.fns = nil
	e.mu.Unlock()
	var first *thenFn // fns reversed
	for fns != nil {
		next := fns.next
		fns.next, first = first, fns
		fns = next
	}
	for ; first != nil; first = first.next {
		first.f()
	}
}

// startRound starts the round on every master. Commands that must not
// pass each other on a master are chained (see "Ordering on each master"
// in docs/design.md): an Ordered transport keeps them in the order they
// are sent; on another, leg i of a round sends nothing before leg i of the
// round it follows has ended. Every round of one holder of a key — one
// token, or one reentrant owner, fair waiter or writer across its
// attempts (chainID) — follows the holder's previous round still running,
// so a late rollback of a failed attempt cannot delete the next attempt's
// grant, nor a late attempt bring back a queue entry or a writer's intent
// that its waiter gave up. A fence commit follows its acquisition's
// command (after), not its end. An acquisition that starts a holder's
// chain follows the client's latest release of the key still in flight,
// so a client that releases and locks again does not find its own old
// token on the masters that were slow to delete it. The wait is bounded by
// the round's own deadline; a leg that gave up still ends only after the
// round it follows, so the chain holds through it.
func (c *Client) startRound(ctx context.Context, op opKind, key, token string, ttl time.Duration, after *round, k kind, fence *fencing) (*round, error) {
	return c.startLed(ctx, op, key, token, ttl, after, k, fence, -1)
}

// startLed is startRound for an acquisition whose master lead (unless -1)
// is asked first: every other leg also waits for the lead's answer, and
// is sent only when the lead granted; else it ends unsent (voteSkip).
func (c *Client) startLed(ctx context.Context, op opKind, key, token string, ttl time.Duration, after *round, k kind, fence *fencing, lead int) (*round, error) {
	n := len(c.masters)
	r := newRound(n)
	r.c, r.op, r.key, r.token, r.ttlMS = c, op, key, token, ttl.Milliseconds()
	r.ledBy = lead + 1
	r.k, r.fence = k, fence
	r.wait = c.boundFor(op, ttl)
	if op == opRelease {
		r.wait = c.releaseWait()
	}
	r.replies, r.deadline, r.ctx = make(chan reply, n), time.Now().Add(r.wait), ctx
	if c.obs != nil {
		r.seen = make([]MasterResult, n)
	}
	if fence != nil && op == opAcquire {
		r.counters = make([]uint64, n)
	}
	if pk, ok := k.(plainKind); ok && pk.waiting && fence == nil && op == opAcquire {
		r.freeAt = make([]atomic.Int64, n)
	}
	r.running.Store(int32(n))
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %s %q", ErrClosed, op, key)
	}
	var older *round // a reentrant owner's previous round, whose retries this one ends
	if k.oneToken() {
		older = c.fin.newest(c, chainID(key, token, k), r, ttl)
	}
	prev := after
	if !c.allOrdered {
		if op != opCommit {
			r.chain = chainID(key, token, k)
			if last := c.chains[r.chain]; last != nil {
				prev = last
			}
			if c.chains == nil {
				c.chains = make(map[string]*round)
			}
			c.chains[r.chain] = r
		}
		switch {
		case op == opAcquire && prev == nil:
			prev = c.releasing[key]
		case op == opRelease:
			c.releasing[key] = r
		}
	}
	// Every leg counts until it ends: Close gives them their grace, and
	// an acquisition's legs end only once it is decided and, when it
	// failed, rolled back. Close finds the round in c.live until then.
	c.workers.Add(n)
	r.liveNext = c.live
	if c.live != nil {
		c.live.livePrev = r
	}
	c.live = r
	c.mu.Unlock()
	if older != nil {
		c.fin.supersede(older, r)
	}
	w := &r.wireBuf
	r.wireInto(w, op, r.argBuf[:])
	for i := range r.legs {
		l := &r.legs[i]
		l.r, l.i = r, i
		w.fill(&l.cmd, r)
		l.cmd.To, l.cmd.Deadline = l, r.deadline
		if r.wait > c.timeout && c.masters[i].knownDown() {
			// A release's longer wait, and an adaptive bound above the
			// timeout, are for masters that are slow, not for one known
			// hung: a command to it gets the per-master timeout, so that
			// it holds no pooled connection longer.
			l.cmd.Deadline = r.deadline.Add(c.timeout - r.wait)
		} else if l.cmd.DropWhenDown && r.wait > c.timeout && !c.masters[i].ordered && !c.masters[i].silentFor(r.wait) {
			// The pooled transport drops an acquisition to a master
			// silent for a per-master timeout; under the adaptive bound
			// such a master is down only once silent for the round's
			// whole wait (round.down). An Ordered transport keeps its
			// own judgement: its silence already follows its reader, and
			// writing to a master it counts down only queues commands
			// behind a frozen one.
			l.cmd.DropWhenDown = false
		}
		if n == 1 && op != opLeave {
			// The caller waits for this reply alone (collect follows):
			// a transport may read it in Send.
			l.cmd.Wait = ctx
		}
	}
	for i := range r.legs {
		r.legs[i].begin(prev)
	}
	return r, nil
}

// begin sends the leg's command, at once on an Ordered transport; on
// another, once the leg of the round it follows (prev) has ended (a fence
// commit: once its acquisition was answered there) and a retry of a
// superseded round still in flight there has ended (finish.go), or gives
// up one per-master timeout after the round's deadline.
func (l *leg) begin(prev *round) {
	r := l.r
	m := &r.c.masters[l.i]
	var waits []*event
	if !m.ordered {
		if prev != nil {
			if r.op == opCommit {
				waits = append(waits, &prev.legs[l.i].answered)
			} else {
				waits = append(waits, &prev.legs[l.i].done)
			}
		}
		if e := r.fin.waitAfter(l.i); e != nil {
			waits = append(waits, e)
		}
	}
	if l.led() {
		waits = append(waits, &r.legs[r.ledBy-1].answered)
		if m.ordered {
			r.sentLed.Add(1)
		}
	}
	if len(waits) == 0 {
		l.send()
		return
	}
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
	l.to(evWait)
	l.waits = len(waits)
	if down != nil {
		l.giveUpLocked()
	} else {
		// The round's patience past the deadline: on a busy process the
		// command it follows may have been answered in time and its
		// reader not have run yet.
		l.due = r.c.patience(r.deadline).first(r.deadline)
		l.timer = time.AfterFunc(time.Until(l.due), l.expire)
	}
	r.mu.Unlock()
	if down != nil {
		l.failDown(down)
	}
	for _, e := range waits {
		e.then(l.ready)
	}
	if dn != nil && l.led() && len(waits) > 1 {
		// After ready: a leg that waited for the lead alone has been
		// sent (or not asked) by then.
		r.legs[r.ledBy-1].answered.then(func() { l.downLed(dn) })
	}
}

// silentFor reports whether the master has been silent for d (Silencer);
// false when its transport cannot tell.
func (m *master) silentFor(d time.Duration) bool {
	s, ok := m.t.(Silencer)
	return ok && s.Silence() >= d
}

// down is why master m is down for the round's acquisition (dn.Down), or
// nil. When the round waits longer than the per-master timeout (the
// adaptive bound: every master answers late of late), a master that has
// been silent for less than that wait is only as slow as the others, not
// down; one silent for longer still is (bound.go).
func (r *round) down(dn Downer, m *master) error {
	err := dn.Down()
	if err == nil || r.wait <= r.c.timeout {
		return err
	}
	if _, ok := m.t.(Silencer); ok && !m.silentFor(r.wait) {
		return nil
	}
	return err
}

// downLed gives a led leg up once its lead granted, when it still waits
// for an earlier command on its master and that master is down (begin).
func (l *leg) downLed(dn Downer) {
	r := l.r
	r.mu.Lock()
	wait := l.state == legWaiting && r.legs[r.ledBy-1].granted()
	r.mu.Unlock()
	if !wait {
		return
	}
	down := r.down(dn, &r.c.masters[l.i])
	if down == nil {
		return
	}
	r.mu.Lock()
	if l.state != legWaiting {
		r.mu.Unlock()
		return
	}
	l.giveUpLocked()
	l.timer.Stop()
	r.mu.Unlock()
	l.failDown(down)
}

// giveUpLocked gives the leg's wait up, unsent: its vote is a failure
// (under round.mu, in legWaiting).
func (l *leg) giveUpLocked() {
	l.to(evGiveUp)
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
	r.replies <- reply{index: l.i, vote: voteFail, err: err}
	l.answered.fire()
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
	gaveUp := l.state == legGaveUp
	if l.led() && r.c.masters[l.i].ordered {
		defer r.sentLed.Done() // sent, or ended unsent
	}
	if !gaveUp && l.led() && (r.decided && r.failed || !r.legs[r.ledBy-1].granted()) {
		// The lead did not grant it (or the round failed meanwhile):
		// this master is not asked. (A round that succeeded meanwhile,
		// on a quorum of the others answering before this leg was
		// readied, still asks it: the lock is held on every master.)
		l.to(evSkip)
		l.vote = voteSkip
		l.timer.Stop()
		if r.seen != nil {
			r.seen[l.i] = MasterResult{Index: l.i, Addr: r.c.masters[l.i].addr, Answer: AnswerNotAsked}
		}
		r.mu.Unlock()
		r.replies <- reply{index: l.i, vote: voteSkip}
		l.answered.fire()
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
	l.to(evWaitsOver)
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
	if l.state != legWaiting {
		r.mu.Unlock()
		return
	}
	if s, ok := r.c.masters[l.i].t.(Silencer); ok {
		p, now := r.c.patience(r.deadline), time.Now()
		if more := p.more(now, p.bound, p.late(now.Sub(l.due)), s); more > 0 {
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
	r.replies <- reply{index: l.i, vote: voteFail, err: err}
	l.answered.fire()
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
	return !r.legs[i].state.sentOnce()
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
		l.to(evHand)
		return true
	}
	l.to(evSend)
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
	l.to(evHanded)
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
		r.c.noteAnswer(l.i, l.askedAt(), now)
	}
	r.answered(l.i, r.op, v, err)
	r.mu.Lock()
	l.to(evAnswer)
	l.vote = v
	act := l.nextLocked()
	r.mu.Unlock()
	r.replies <- reply{index: l.i, vote: v, err: err}
	l.answered.fire()
	l.act(act)
}

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
	if failed && !info.Sent {
		r.fin.markUnsent(op, i)
	}
	if failed && finishes(op, r) {
		r.c.finishLater(r, i, op, err)
	}
	if info.Resent && err == nil && v == voteNo && op != opExtend {
		v, err = voteFail, fmt.Errorf("%s retried after a broken connection: the first try may have run", op)
	}
	return v, err
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
	case l.state == legAnswered && (r.op != opAcquire || l.vote == voteNo || r.decided && !r.failed):
		l.to(evEnd)
		return legEnd
	case r.op == opAcquire && r.decided && r.failed &&
		(l.state == legAnswered || l.state == legSent && r.c.masters[l.i].ordered):
		// On an Ordered transport the rollback is queued behind the
		// SET, once the SET was handed to it (send): handed over first,
		// it would run first, find nothing, and the SET would stay.
		l.to(evRollback)
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
	l.to(evRolledBack)
	unknown := r.setUnansweredLocked(l.i)
	r.mu.Unlock()
	if err == nil && v == voteNo && unknown {
		r.c.confirmLater(r, l.i)
	}
	l.end()
}

// settledAt reports whether the round's command can no longer run on
// master i: the master answered it (granted or refused), or it was never
// sent there and never will be (not asked, given up before it was sent,
// failed unsent). A command that failed unanswered may still run, late.
func (r *round) settledAt(i int) bool {
	if i < 64 && r.fin.unsent.Load()&(1<<i) != 0 {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l := &r.legs[i]
	return l.vote == voteYes || l.vote == voteNo || l.vote == voteSkip || l.state == legGaveUp || l.state == legEndedUnsent
}

// settledEverywhere reports whether settledAt holds on every master.
func (r *round) settledEverywhere() bool {
	for i := range r.legs {
		if !r.settledAt(i) {
			return false
		}
	}
	return true
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

// end ends the leg (whoever calls it has moved it to an ended state,
// under round.mu):
// rounds chained after it on its master go on, and the last leg frees the
// round.
func (l *leg) end() {
	r := l.r
	l.done.fire()
	if r.running.Add(-1) == 0 {
		r.forget()
	}
	r.c.workers.Done()
}

// forget removes the round from the client's live rounds and its chains
// once its last leg has ended.
func (r *round) forget() {
	c := r.c
	c.mu.Lock()
	if r.livePrev != nil {
		r.livePrev.liveNext = r.liveNext
	} else {
		c.live = r.liveNext
	}
	if r.liveNext != nil {
		r.liveNext.livePrev = r.livePrev
	}
	r.liveNext, r.livePrev = nil, nil
	if !c.allOrdered {
		if c.releasing[r.key] == r {
			delete(c.releasing, r.key)
		}
		if r.chain != "" && c.chains[r.chain] == r {
			delete(c.chains, r.chain)
		}
	}
	c.mu.Unlock()
}

// errAbandoned fails what Close completes itself: a command a transport
// did not complete one per-master timeout after its Close, and any
// command sent after that (Client.abandon).
var errAbandoned = fmt.Errorf("%w: the transport did not answer by its Close and one per-master timeout", ErrClosed)

// abandon completes, with errAbandoned, every command the transports
// still hold unanswered — a transport that breaks its contract by not
// completing even at Close — and makes every later send fail unsent, so
// that Close is bounded. A late completion from the transport is then
// ignored (complete-once). Completing a leg may end it and so let a leg
// chained after it go on: that one then fails unsent.
func (c *Client) abandon() {
	c.abandoned.Store(true)
	c.mu.Lock()
	var rounds []*round
	for r := c.live; r != nil; r = r.liveNext {
		rounds = append(rounds, r)
	}
	c.mu.Unlock()
	var pending []completer
	for _, r := range rounds {
		r.mu.Lock()
		for i := range r.legs {
			if l := &r.legs[i]; l.state.sentOnce() && !l.completed.Load() {
				pending = append(pending, l)
			}
			if r.rbq != nil {
				if q := r.rbq[i]; q != nil && !q.completed.Load() {
					pending = append(pending, q)
				}
			}
		}
		r.mu.Unlock()
	}
	pending = c.fin.unanswered(pending)
	for _, p := range pending {
		p.complete(nil, errAbandoned, SendInfo{Sent: true})
	}
}

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
			r.legs[i].done.then(func() {
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

// chainID names the holder of key whose rounds must reach each master in
// the order they are started: a reentrant owner (whose token is the
// owner), a fair waiter or a writer (stable across their attempts, whose
// queue entry or intent each attempt refreshes and a leave removes), else
// the token.
func chainID(key, token string, k kind) string {
	id := k.holder()
	if id == "" {
		id = "t:" + token
	}
	return key + "\x00" + id
}

// wireCmd is an operation's command: built once per round and shared,
// read-only, by every master.
type wireCmd struct {
	op      opKind
	script  *scripts.Script // nil for a plain command
	cmd     string          // "EVALSHA", or the plain command
	args    []any           // as a redigo connection sends them (EVALSHA: the hash and key count first)
	keysAnd []any           // the keys and values (a plain command: its arguments)
	nkeys   int
	want    expect // what the reply may be
}

// fill writes w into cmd, with what the command is for a transport's
// choices (Command.Resend and the others).
func (w *wireCmd) fill(cmd *Command, r *round) {
	op := w.op
	*cmd = Command{Name: w.cmd, Args: w.keysAnd, NumKeys: w.nkeys, Reply: ReplyShape(w.want), Wire: w.args,
		Resend: true,
		// Run late (after commands submitted later, see muxConn.noScript), a
		// release, rollback, extension or leave finds nothing, or its own
		// token: no later round uses it, but a reentrant owner's do.
		MayRunLate:   op != opAcquire && op != opCommit && op != opHeal && !r.k.oneToken(),
		Undo:         op == opRollback || op == opLeave, // never refused as busy (muxUndo)
		DropWhenDown: op == opAcquire || op == opExtend,
	}
	if w.script != nil {
		cmd.Script = wrapScript(w.script)
	}
}

// wireInto builds op's command into w, its arguments in buf when it has
// room, after two slots kept for EVALSHA's script hash and key count.
func (r *round) wireInto(w *wireCmd, op opKind, buf []any) {
	if cap(buf) < 2 {
		buf = make([]any, 0, 12)
	}
	script, cmd, args := r.command(op, buf[2:2])
	if script == nil {
		*w = wireCmd{op: op, cmd: cmd, args: args, keysAnd: args, want: expectOf(nil)}
		return
	}
	nkeys := r.nkeys(script)
	var full []any
	if len(args)+2 <= cap(buf) && (len(args) == 0 || &args[0] == &buf[:cap(buf)][2]) {
		full = buf[:2+len(args)]
		script.PrefixArgs(full, nkeys)
	} else { // command outgrew buf
		full = script.AppendArgsKeys(make([]any, 0, 2+len(args)), nkeys, args...)
	}
	// A script wrapped to keep holder metadata replies as its own.
	*w = wireCmd{op: op, script: script, cmd: "EVALSHA", args: full, keysAnd: full[2:], nkeys: nkeys, want: expectOf(script.Inner())}
}

// command returns what op sends to a master: a script and its keys and
// values, or a plain command and its arguments, appended to dst.
func (r *round) command(op opKind, dst []any) (script *scripts.Script, cmd string, args []any) {
	if op == opHeal {
		return r.healCommand(dst)
	}
	if op == opCommit { // the second phase of a fenced acquisition, of any kind that has one
		if mk, ok := r.k.(*metaKind); ok && mk.meta.term { // an election's: the term recorded with the holder
			return scripts.FenceCommitTerm, "", append(dst, r.key, r.fence.counter, mk.meta.key, r.token, r.fence.arg)
		}
		return scripts.FenceCommit, "", append(dst, r.key, r.fence.counter, r.token, r.fence.arg)
	}
	return r.k.command(r, op, dst)
}

// nkeys is how many of script's arguments are keys in this round.
func (r *round) nkeys(script *scripts.Script) int {
	if n := script.KeyCount(); n >= 0 {
		return n
	}
	n := len(r.k.keys(r.key))
	if script != script.Inner() {
		// Wrapped for holder metadata: a multi-key lock has a hash per
		// key, any other lock one more key.
		if mk, ok := r.k.(*metaKind); ok && mk.meta.keys != nil {
			return 2 * n
		}
		return n + 1
	}
	return n
}

// expect is what a command's reply may be, besides an error reply (which
// any command may get). A reply that does not fit is never a vote: it says
// that the connection is out of step with its master.
type expect uint8

const (
	expectSet     = expect(transport.ReplySet)     // SET NX PX: "OK", or nil when the key exists
	expectFlag    = expect(transport.ReplyFlag)    // the scripts that answer 1 or 0
	expectCounter = expect(transport.ReplyCounter) // a fenced acquisition: 0, or the counter as a decimal string
	expectSHA     = expect(transport.ReplySHA)     // SCRIPT LOAD: a script's SHA1, 40 hex digits
	expectRW      = expect(transport.ReplyRW)      // the read-write script: 1 or 0, or for a read acquisition 2 (a writer waits)
	expectInfo    = expect(transport.ReplyInfo)    // INFO: a bulk string (its size is checked by whoever reads it)
	expectTTL     = expect(transport.ReplyTTL)     // a waiting plain acquisition: "OK", or the holder's remaining TTL
)

// expectOf returns what script's replies may be (nil: the plain SET).
// See internal/scripts/*.lua.
func expectOf(script *scripts.Script) expect {
	switch script {
	case nil, scripts.Acquire: // SET NX PX, or it as a script (meta.go)
		return expectSet
	case scripts.FencedAcquire, scripts.FairFencedAcquire:
		return expectCounter
	case scripts.RW:
		return expectRW
	case scripts.WaitAcquire:
		return expectTTL
	default:
		return expectFlag
	}
}

// fits reports whether v is a reply e allows.
func (e expect) fits(v any) bool { return transport.ReplyShape(e).Fits(v) }

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
		for { // a refusal, for a waiting writer
			if w := r.writerWaits.Load(); r.writerWaits.CompareAndSwap(w, w|1<<i) {
				break
			}
		}
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
	// master is not identified (countGate); nil otherwise. Then yes
	// counts the grants that count, pending those that may once the first
	// probe ended, lost those that never will in this round, and probing
	// holds the outcome open until the first probe ended.
	gate          *countGate
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

// mayCount reports whether the grants, counted or pending, could make a
// quorum once the first probe ended.
func (t *tally) mayCount(quorum int) bool {
	return t.probing && t.yes+t.pending+t.free >= quorum
}

func (t *tally) add(rp reply) {
	t.votes[rp.index] = rp.vote
	switch rp.vote {
	case voteYes:
		if t.gate != nil {
			t.gate.count(t)
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
		if t.gate = c.ident.gate(); t.gate != nil {
			t.gate.count(&t)
			probed = t.gate.first
		}
	}
	if probed != nil {
		closing = c.closing
	}
	timer := c.clock.NewTimer(r.wait)
	defer func() { timer.Stop() }()
	due := c.clock.Now().Add(r.wait)
	p := c.patience(due)
	c.stalls.Rounds.Enter()
	defer c.stalls.Rounds.Leave()
	var last time.Time // the latest an overdue wait may end: set when the timer first fires
	var hold time.Time // the end of the readers' time after a late timer (patience.late)
	for t.open(c.quorum, n) {
		select {
		case rp := <-r.replies:
			t.add(rp)
			if !last.IsZero() && t.open(c.quorum, n) {
				// An overdue wait: this reply may have been what it
				// waited for.
				now := c.clock.Now()
				if c.overdue(&t, p, hold.Sub(now), now, last) == 0 {
					c.timedOut(&t, r)
					t.awaitProbe(ctx, c.quorum)
					return t
				}
			}
		case <-probed:
			probed, closing = nil, nil
			t.gate.count(&t)
		case <-closing:
			// Close stops the probe (which may be held up sending to a
			// hung master): nothing more is identified, and the round
			// ends undecided (t.probing), failing with ErrClosed.
			c.ident.stopped.Store(true)
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
			switch {
			case last.IsZero():
				// One more timeout from when this goroutine ran again,
				// however late: a process that did not run for longer
				// than the timeout gave its readers no chance either.
				last = p.first(now)
			case late:
				// Nor did one that stopped again before they ran: the
				// time it lost is added (not a whole timeout, so that a
				// process always a little late does not wait on a hung
				// master much longer than a timeout).
				last = last.Add(lateBy)
			}
			if last.After(p.bound) {
				last = p.bound
			}
			allow := p.late(lateBy)
			hold = now.Add(allow)
			if more := c.overdue(&t, p, allow, now, last); t.open(c.quorum, n) && more > 0 {
				due = now.Add(more)
				timer = c.clock.NewTimer(more)
				continue
			}
			c.timedOut(&t, r)
			t.awaitProbe(ctx, c.quorum)
			return t
		case <-ctx.Done():
			t.ctxErr = ctx.Err()
			return t
		}
	}
	return t
}

// awaitProbe waits, when the round stopped waiting for its masters, for
// the first probe to end if the grants could make a quorum then
// (tally.mayCount), then counts them, but never past ctx. The
// probe started before the round, so this adds at most probeGrace.
func (t *tally) awaitProbe(ctx context.Context, quorum int) {
	if !t.mayCount(quorum) {
		return
	}
	select {
	case <-t.gate.first:
		t.gate.count(t)
	case <-ctx.Done():
		t.ctxErr = ctx.Err()
	}
}

// knownDown reports whether the master's transport knows it down now
// (Downer): it has left commands unanswered for longer than the
// per-master timeout.
func (m *master) knownDown() bool {
	d, ok := m.t.(Downer)
	return ok && d.Down() != nil
}

// releaseWait is how long a release waits for a master: one per-master
// timeout, and at least lateBound (a second with the default timeout) on
// transports that are not Ordered, half of it where some master's is
// (half a second), to stay clear of the stall bound at which a pipelined
// connection is broken (lateBound past its oldest unanswered command: a
// release waiting that long would be failed by the break, and cost the
// connection). A release has no validity to
// protect (the lock's ended when it started), so a master that is merely
// slow — its machine busy, all masters slowed at once on a loaded host —
// is waited for and confirms it, rather than counted failed at a bound
// chosen to keep a hung master from eating an acquisition's validity.
// The caller's ctx still bounds the wait, and the round returns as soon as
// a quorum is confirmed: only a release that needs a silent master's
// answer waits this long.
func (c *Client) releaseWait() time.Duration {
	if c.someOrdered {
		return max(c.timeout, stall.LateBound(c.timeout)/2)
	}
	return stall.LateBound(c.timeout)
}

// timedOut counts the masters that have not answered as failed when
// collect stops waiting for them — or as not asked: a led leg the lead's
// answer was not read in time for.
func (c *Client) timedOut(t *tally, r *round) {
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
			t.errs = append(t.errs, c.nodeErrorIn(&c.masters[i], context.DeadlineExceeded, r.wait))
		}
	}
}

// overdue is asked by collect when the per-master timeout ends with
// masters unanswered, and again at each reply read while it waits on: how
// much longer to wait for them by the round's patience p, or 0 to count
// them as failed now. The wait never goes past last; allow is what is
// left at now of the readers' time after a late timer (patience.late; 0
// or less: none).
func (c *Client) overdue(t *tally, p patience, allow time.Duration, now, last time.Time) time.Duration {
	var ss []Silencer
	for i, v := range t.votes {
		if v != 0 {
			continue
		}
		if s, ok := c.masters[i].t.(Silencer); ok {
			ss = append(ss, s)
		}
	}
	return p.more(now, last, allow, ss...)
}

// patience is a round's one rule for how long a master may stay silent
// before it counts as failed, for collect (a round's replies) and for
// leg.expire (a chained leg's wait to be sent). A pipelined master's
// answer is read by a goroutine of this process; when the CPUs are busy
// with other work, that goroutine (and the one whose timer fired late)
// may not have run for longer than the timeout, while the master answered
// in time. So:
//
//   - a wait that ended gets one more per-master timeout from then,
//     however late it ended (first);
//   - a timer that fired late — this process did not run — gives the
//     readers as long again, at most a timeout (late);
//   - a master is blamed only once it has been silent (Silencer) for the
//     whole timeout (more);
//   - nothing waits past bound: the round's deadline and lateBound more.
//
// The outcome stays as sound as before: validity is counted from the
// round's start, and an answer taken later counts as it would have on
// time. See "A busy process is not a silent master" in docs/design.md.
type patience struct {
	timeout time.Duration // the per-master timeout
	bound   time.Time     // the latest any wait of the round may end
}

// patience returns the rule of a round whose commands are waited for
// until deadline (on whichever clock the caller measures it).
func (c *Client) patience(deadline time.Time) patience {
	return patience{timeout: c.timeout, bound: deadline.Add(stall.LateBound(c.timeout))}
}

// first is when a wait that ended at from gives up at the earliest: one
// more timeout for the readers.
func (p patience) first(from time.Time) time.Time { return from.Add(p.timeout) }

// late is how much longer to wait for the readers after a timer that
// fired late by lateBy: as long again (this process did not run, nor did
// they), at most a timeout; nothing for a timer on time.
func (p patience) late(lateBy time.Duration) time.Duration {
	if lateBy > time.Millisecond {
		return min(lateBy, p.timeout)
	}
	return 0
}

// more returns how much longer to wait, from now, for the masters of
// silent, which have not answered: at least allow, and what is left of a
// timeout's silence on any of them (at least a millisecond when any is
// left: a master that is not silent may have answered, its reader not
// yet run); never past until nor bound. 0: count them as failed now.
func (p patience) more(now, until time.Time, allow time.Duration, silent ...Silencer) time.Duration {
	if p.bound.Before(until) {
		until = p.bound
	}
	room := until.Sub(now)
	if room <= 0 {
		return 0
	}
	more := max(allow, 0)
	for _, s := range silent {
		if left := p.timeout - s.Silence(); left > more {
			more = max(left, time.Millisecond)
		}
	}
	return min(more, room)
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
