package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/internal/scripts"
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
	fair  *fairness // nil for a plain lock
	fence *fencing  // nil for a lock without fencing
	v     *variant  // nil for a plain lock
	// counters[i] is master i's fencing counter, from a fenced
	// acquisition's reply; written before the reply is reported.
	counters []uint64
	chain    string    // the key in Client.chains this round is the newest of, or ""
	deadline time.Time // when its commands stop being waited for
	running  atomic.Int32

	replies chan reply

	mu      sync.Mutex // guards decided, failed and the legs' state
	decided bool
	failed  bool
	legs    []leg

	// rb is a failed acquisition's rollback, built once it is decided.
	rb *wireCmd

	// fin: retries of its release or rollback that a master missed
	// (finish.go).
	fin roundFin

	// The round's command and its legs, held here so that a round is one
	// allocation.
	wireBuf wireCmd
	argBuf  [12]any
	legBuf  [inlineMasters]leg
}

// inlineMasters is how many masters' legs a round holds without a
// further allocation.
const inlineMasters = 7

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
	waits   int         // events the leg waits for before it sends
	timer   *time.Timer // ends that wait at the round's deadline
	gaveUp  bool        // it stopped waiting: nothing was sent
	sent    bool
	replied bool
	vote    vote
	rolling bool // the rollback was sent
	ended   bool
}

// event fires once; what waits for it runs then (on the goroutine that
// fires it), or at once when it already has.
type event struct {
	mu    sync.Mutex
	fired bool
	ch    chan struct{} // made by wait, closed when it fires
	fns   []func()
}

// then runs f when e fires (at once if it has).
func (e *event) then(f func()) {
	e.mu.Lock()
	if e.fired {
		e.mu.Unlock()
		f()
		return
	}
	e.fns = append(e.fns, f)
	e.mu.Unlock()
}

// wait returns a channel that closes when e fires.
func (e *event) wait() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ch == nil {
		e.ch = make(chan struct{})
		if e.fired {
			close(e.ch)
		}
	}
	return e.ch
}

// fire fires e, once, and runs what waited for it.
func (e *event) fire() {
	e.mu.Lock()
	if e.fired {
		e.mu.Unlock()
		return
	}
	e.fired = true
	fns := e.fns
	e.fns = nil
	if e.ch != nil {
		close(e.ch)
	}
	e.mu.Unlock()
	for _, f := range fns {
		f()
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
func (c *Client) startRound(ctx context.Context, op opKind, key, token string, ttl time.Duration, after *round, sh shape) (*round, error) {
	n := len(c.masters)
	r := &round{
		c: c, op: op, key: key, token: token, ttlMS: ttl.Milliseconds(), fair: sh.fair, fence: sh.fence, v: sh.v,
		replies: make(chan reply, n), deadline: time.Now().Add(c.timeout),
	}
	if sh.fence != nil && op == opAcquire {
		r.counters = make([]uint64, n)
	}
	if n <= inlineMasters {
		r.legs = r.legBuf[:n]
	} else {
		r.legs = make([]leg, n)
	}
	r.running.Store(int32(n))
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %s %q", ErrClosed, op, key)
	}
	var older *round // a reentrant owner's previous round, whose retries this one ends
	if sh.v != nil && sh.v.kind == kindReentrant {
		older = c.fin.newest(c, chainID(key, token, sh), r, ttl)
	}
	prev := after
	if !c.allOrdered {
		if op != opCommit {
			r.chain = chainID(key, token, sh)
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
	// failed, rolled back.
	c.workers.Add(n)
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
		l.cmd.to, l.cmd.Deadline = l, r.deadline
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
// up at the round's deadline.
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
	if len(waits) == 0 {
		l.send()
		return
	}
	r.mu.Lock()
	l.waits = len(waits)
	l.timer = time.AfterFunc(time.Until(r.deadline), l.expire)
	r.mu.Unlock()
	for _, e := range waits {
		e.then(l.ready)
	}
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
	gaveUp := l.gaveUp
	if gaveUp {
		l.ended = true
	} else {
		l.timer.Stop()
	}
	r.mu.Unlock()
	if !gaveUp {
		l.send()
		return
	}
	if finishes(r.op, r) {
		// A release that never went out is sent later.
		r.c.finishLater(r, l.i, r.op, l.errGaveUp())
	}
	l.end()
}

// expire gives up the leg's wait at the round's deadline: the previous
// command on this master is still pending (the master is slow or hung).
// Nothing was sent, so nothing needs undoing; the leg ends only after
// what it waited for, so the rounds chained after it still follow that.
func (l *leg) expire() {
	r := l.r
	r.mu.Lock()
	if l.waits == 0 || l.gaveUp {
		r.mu.Unlock()
		return
	}
	l.gaveUp, l.replied, l.vote = true, true, voteFail
	r.mu.Unlock()
	r.replies <- reply{index: l.i, vote: voteFail, err: l.errGaveUp()}
	l.answered.fire()
}

func (l *leg) errGaveUp() error {
	return l.r.c.nodeError(&l.r.c.masters[l.i], fmt.Errorf("an earlier command on this key is still pending: %w", context.DeadlineExceeded))
}

func (l *leg) send() {
	r := l.r
	r.mu.Lock()
	l.sent = true
	r.mu.Unlock()
	r.c.masters[l.i].t.Send(&l.cmd)
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
		err = r.c.nodeError(m, err)
		r.c.logFailure(r.op, r.key, m, err)
	}
	r.mu.Lock()
	l.replied, l.vote = true, v
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
	if err != nil && !info.Sent {
		r.fin.markUnsent(op, i)
	}
	if err != nil && finishes(op, r) {
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
	a := l.nextActLocked()
	switch a {
	case legEnd:
		l.ended = true
	case legRollback:
		l.rolling = true
	}
	return a
}

func (l *leg) nextActLocked() legAct {
	r := l.r
	switch {
	case l.ended || l.rolling:
		return legWait
	case l.gaveUp:
		return legWait // ends once what it waited for has (ready)
	case r.op != opAcquire:
		if l.replied {
			return legEnd
		}
		return legWait
	case l.replied && l.vote == voteNo:
		return legEnd
	case !r.decided:
		return legWait
	case !r.failed:
		if l.replied {
			return legEnd
		}
		return legWait
	case l.replied || (l.sent && r.c.masters[l.i].ordered):
		return legRollback
	default:
		return legWait
	}
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
	q.cmd.to, q.cmd.Deadline = q, time.Now().Add(r.c.timeout)
	r.c.masters[l.i].t.Send(&q.cmd)
}

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
	if _, err := r.answer(l.i, opRollback, r.rb, res, err, info); err != nil {
		m := &r.c.masters[l.i]
		r.c.logFailure(opRollback, r.key, m, r.c.nodeError(m, err))
	}
	r.mu.Lock()
	l.ended = true
	r.mu.Unlock()
	l.end()
}

// end ends the leg (whoever calls it has set ended, under round.mu):
// rounds chained after it on its master go on, and the last leg frees the
// round.
func (l *leg) end() {
	r := l.r
	l.done.fire()
	if r.running.Add(-1) == 0 && !r.c.allOrdered {
		r.forget()
	}
	r.c.workers.Done()
}

// forget removes the round from the client's chains once its last leg
// has ended.
func (r *round) forget() {
	c := r.c
	c.mu.Lock()
	if c.releasing[r.key] == r {
		delete(c.releasing, r.key)
	}
	if r.chain != "" && c.chains[r.chain] == r {
		delete(c.chains, r.chain)
	}
	c.mu.Unlock()
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
func chainID(key, token string, sh shape) string {
	id := "t:" + token
	switch {
	case sh.fair != nil:
		id = "f:" + sh.fair.waiter
	case sh.v != nil && sh.v.kind == kindWrite:
		id = "w:" + sh.v.writer
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
	*cmd = Command{Name: w.cmd, Args: w.keysAnd, NumKeys: w.nkeys, Reply: ReplyShape(w.want), wire: w.args,
		Resend: true,
		// Run late (after commands submitted later, see muxConn.noScript), a
		// release, rollback, extension or leave finds nothing, or its own
		// token: no later round uses it, but a reentrant owner's do.
		MayRunLate:   op != opAcquire && op != opCommit && (r.v == nil || r.v.kind != kindReentrant),
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
	full := buf[:2+len(args)]
	nkeys := r.nkeys(script)
	if len(args) > 0 && &args[0] != &full[2] { // command outgrew buf
		full = script.AppendArgsKeys(make([]any, 0, 2+len(args)), nkeys, args...)
	} else {
		script.PrefixArgs(full, nkeys)
	}
	*w = wireCmd{op: op, script: script, cmd: "EVALSHA", args: full, keysAnd: full[2:], nkeys: nkeys, want: expectOf(script)}
}

// brokenConn reports whether err says the master closed the connection
// (EOF, reset, broken pipe): it runs nothing more that came on it. Not
// net.ErrClosed, which says this side closed it, as the mux does when a
// master stalls or is out of step, and the master may still run what it
// read.
func brokenConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// command returns what op sends to a master: a script and its keys and
// values, or a plain command and its arguments, appended to dst.
func (r *round) command(op opKind, dst []any) (script *scripts.Script, cmd string, args []any) {
	if r.v != nil {
		return r.v.command(r, op, dst)
	}
	key, token, f := r.key, r.token, r.fair
	switch {
	case op == opAcquire && f != nil && r.fence != nil:
		return scripts.FairFencedAcquire, "", append(dst, key, f.queue, f.deadlines, r.fence.counter, token, r.ttlMS, f.waiter, f.arrival, f.entryTTLms)
	case op == opAcquire && r.fence != nil:
		return scripts.FencedAcquire, "", append(dst, key, r.fence.counter, token, r.ttlMS)
	case op == opCommit:
		return scripts.FenceCommit, "", append(dst, key, r.fence.counter, token, r.fence.arg)
	case op == opAcquire && f != nil:
		return scripts.FairAcquire, "", append(dst, key, f.queue, f.deadlines, token, r.ttlMS, f.waiter, f.arrival, f.entryTTLms)
	case op == opAcquire:
		return nil, "SET", append(dst, key, token, "NX", "PX", r.ttlMS)
	case op == opExtend:
		return scripts.Extend, "", append(dst, key, token, r.ttlMS)
	case op == opRelease && f != nil:
		return scripts.FairRelease, "", append(dst, key, f.queue, f.deadlines, token, wakeChannel(key), f.waiter)
	case op == opRelease:
		return scripts.Release, "", append(dst, key, token, wakeChannel(key))
	case op == opRollback:
		// Not announced: after a split vote every contender rolls back,
		// and waking them all at once would split the vote again; their
		// jittered backoff spreads the next attempts instead. A fair
		// waiter keeps its place in the queue.
		return scripts.Release, "", append(dst, key, token, "")
	default: // opLeave
		return scripts.Leave, "", append(dst, f.queue, f.deadlines, f.waiter)
	}
}

// nkeys is how many of script's arguments are keys in this round.
func (r *round) nkeys(script *scripts.Script) int {
	if n := script.KeyCount(); n >= 0 {
		return n
	}
	return len(r.v.keys)
}

// expect is what a command's reply may be, besides an error reply (which
// any command may get). A reply that does not fit is never a vote: it says
// that the connection is out of step with its master.
type expect uint8

const (
	expectSet     expect = iota + 1 // SET NX PX: "OK", or nil when the key exists
	expectFlag                      // the scripts that answer 1 or 0
	expectCounter                   // a fenced acquisition: 0, or the counter as a decimal string
	expectSHA                       // SCRIPT LOAD: a script's SHA1, 40 hex digits
)

// expectOf returns what script's replies may be (nil: the plain SET).
// See internal/scripts/*.lua.
func expectOf(script *scripts.Script) expect {
	switch script {
	case nil:
		return expectSet
	case scripts.FencedAcquire, scripts.FairFencedAcquire:
		return expectCounter
	default:
		return expectFlag
	}
}

// fits reports whether v is a reply e allows.
func (e expect) fits(v any) bool {
	switch e {
	case expectSet:
		return v == nil || v == "OK"
	case expectFlag:
		return v == int64(0) || v == int64(1)
	case expectCounter:
		if v == int64(0) {
			return true
		}
		b, ok := v.([]byte)
		if !ok || len(b) == 0 || len(b) > 20 {
			return false
		}
		for _, d := range b {
			if d < '0' || d > '9' {
				return false
			}
		}
		return true
	case expectSHA:
		b, ok := v.([]byte)
		if !ok || len(b) != 40 {
			return false
		}
		for _, d := range b {
			if (d < '0' || d > '9') && (d < 'a' || d > 'f') {
				return false
			}
		}
		return true
	default:
		return false
	}
}

// decode turns master i's reply to op, which must fit want, into its vote;
// a fenced acquisition's counter goes to r.counters[i].
func (r *round) decode(i int, op opKind, want expect, res any, err error) (vote, error) {
	if re, ok := err.(ReplyError); ok {
		err = redis.Error(re) // as redigo reports it: what callers of this package see
	}
	if err != nil {
		return voteFail, scripts.Explain(err)
	}
	if !want.fits(res) {
		return voteFail, &desyncError{cmd: op.String(), reply: describe(res)}
	}
	switch {
	case res == nil || res == int64(0):
		return voteNo, nil
	case want == expectCounter:
		n, perr := strconv.ParseUint(string(res.([]byte)), 10, 64)
		if perr != nil || n >= maxFence || r.counters == nil {
			return voteFail, fmt.Errorf("fencing counter %s out of range", describe(res))
		}
		r.counters[i] = n
	}
	return voteYes, nil
}

// nodeError names the master and turns the many shapes of a timeout into
// ErrMasterTimeout, so that errors.Is(err, context.DeadlineExceeded) stays
// true only when the caller's own context expired.
func (c *Client) nodeError(m *master, err error) *NodeError {
	err = m.redact(err)
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		err = fmt.Errorf("%w (%v): %s", ErrMasterTimeout, c.timeout, err.Error())
	}
	return &NodeError{Index: m.index, Addr: m.addr, Err: err}
}

// describe names a reply for an error message. Bytes from a master are
// quoted only when the reply is short and plain (printable ASCII without
// quotes or backslashes), so that they show whole and unchanged: a
// password a master echoes is then found and redacted (pool.Redactor),
// where a reply cut short, escaped, or printed as decimal bytes would
// show it in a form the redaction does not recognise.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil"
	case []byte:
		if quotable(string(v)) {
			return `"` + string(v) + `"`
		}
		return "a bulk string of " + strconv.Itoa(len(v)) + " bytes"
	case string:
		if quotable(v) {
			return "string(" + v + ")"
		}
		return "a status of " + strconv.Itoa(len(v)) + " bytes"
	case []any:
		return "an array of " + strconv.Itoa(len(v)) + " elements"
	case int64:
		return "int64(" + strconv.FormatInt(v, 10) + ")"
	default:
		return fmt.Sprintf("a reply of type %T", v)
	}
}

// quotable reports whether s may be quoted whole in a message.
func quotable(s string) bool {
	if len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// tally counts a round's replies.
type tally struct {
	yes, no, fail int
	votes         []vote // by master; 0 while it has not answered
	refused       []int
	errs          []error
	ctxErr        error
}

func (t *tally) ok(quorum int) bool { return t.yes >= quorum }

func (t *tally) add(rp reply) {
	t.votes[rp.index] = rp.vote
	switch rp.vote {
	case voteYes:
		t.yes++
	case voteNo:
		t.no++
		t.refused = append(t.refused, rp.index)
	default:
		t.fail++
		t.errs = append(t.errs, rp.err)
	}
}

// collect gathers replies until the outcome is known: a quorum of yes, or
// so many no and failures that a quorum is impossible. It never waits
// longer than the per-master timeout, nor past ctx, and never for the
// masters it does not need.
func (c *Client) collect(ctx context.Context, r *round) tally {
	n := len(c.masters)
	t := tally{votes: make([]vote, n)}
	timer := c.clock.NewTimer(c.timeout)
	defer timer.Stop()
	for t.yes < c.quorum && t.no+t.fail <= n-c.quorum {
		select {
		case rp := <-r.replies:
			t.add(rp)
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
			for i, v := range t.votes {
				if v == 0 {
					t.fail++
					t.errs = append(t.errs, c.nodeError(&c.masters[i], context.DeadlineExceeded))
				}
			}
			return t
		case <-ctx.Done():
			t.ctxErr = ctx.Err()
			return t
		}
	}
	return t
}

// quorumError describes a round that did not succeed.
func (c *Client) quorumError(t tally, r *round, sentinel error, noValidity bool) *QuorumError {
	qe := &QuorumError{
		Op: r.op.String(), Key: r.key, Masters: len(c.masters), Quorum: c.quorum,
		Succeeded: t.yes, Refused: t.refused, NoValidity: noValidity,
		sentinel: sentinel, ctxErr: t.ctxErr, addrs: c.addrs,
	}
	if len(t.errs) > 0 {
		qe.Failed = multierror.Append(nil, t.errs...)
	}
	return qe
}
