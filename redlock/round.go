package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
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

// round is one operation sent to every master in parallel. Each master has
// its own worker goroutine, tracked by the client, which sends the command,
// reports the reply, and — for an acquisition that failed — releases the
// key on its master right after that master's SET has been answered or
// timed out, so a rollback can never overtake the SET it undoes.
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
	ctx      context.Context // per-round bound, free of the caller's cancellation (pooled path only)
	chain    string          // pooled path: the key in Client.chains this round is the newest of, or ""
	cancel   context.CancelFunc
	running  atomic.Int32 // workers still running; the last one frees the round
	// held: a pipelined acquisition counts once more in Client.workers
	// until it is decided and, when it failed, its rollback is queued, so
	// that Close cannot close the connections in between.
	held atomic.Bool

	replies chan reply
	decided chan struct{}   // pooled path only
	failed  bool            // written before decided is closed
	done    []chan struct{} // pooled path only: done[i] closes when worker i has finished
	// Pooled path, fenced acquisitions only: answered[i] closes when
	// master i has answered (or the worker gave up), for the fence commit.
	answered []chan struct{}

	// fin: retries of its release or rollback that a master missed
	// (finish.go).
	fin roundFin

	// Pipelined path only: the round's command and its per-master
	// requests, held here so that a round is one allocation.
	wireBuf wireCmd
	argBuf  [12]any
	reqBuf  [inlineMasters]roundReq
}

// startRound starts one worker per master. Commands that must not pass
// each other on a master are chained: worker i of a round sends nothing
// before worker i of the round it follows has finished (see "Ordering on
// each master" in docs/design.md). Every round of one holder of a key —
// one token, or one reentrant owner, fair waiter or writer across its
// attempts (chainID) — follows the holder's previous round still running,
// so a late rollback of a failed attempt cannot delete the next attempt's
// grant, nor a late attempt bring back a queue entry or a writer's intent
// that its waiter gave up. A fence commit follows its acquisition's
// command (after), not its end. An acquisition that starts a holder's
// chain follows the client's latest release of the key still in flight,
// so a client that releases and locks again does not find its own old
// token on the masters that were slow to delete it. The wait is bounded by
// the round's own deadline; a worker that gave up still finishes only
// after the round it follows, so the chain holds through it.
func (c *Client) startRound(ctx context.Context, op opKind, key, token string, ttl time.Duration, after *round, sh shape) (*round, error) {
	n := len(c.masters)
	r := &round{
		c: c, op: op, key: key, token: token, ttlMS: ttl.Milliseconds(), fair: sh.fair, fence: sh.fence, v: sh.v,
		replies: make(chan reply, n),
	}
	if sh.fence != nil && op == opAcquire {
		r.counters = make([]uint64, n)
	}
	r.running.Store(int32(n))
	workers := n
	if c.allOrdered && op == opAcquire {
		r.held.Store(true)
		workers++
	}
	if !c.allOrdered {
		// What the worker goroutines need: a bound, the decision, and
		// their completion for the rounds chained after this one.
		r.ctx, r.cancel = context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
		r.decided = make(chan struct{})
		r.done = make([]chan struct{}, n)
		for i := range r.done {
			r.done[i] = make(chan struct{})
		}
		if r.counters != nil {
			r.answered = make([]chan struct{}, n)
			for i := range r.answered {
				r.answered[i] = make(chan struct{})
			}
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		if r.cancel != nil {
			r.cancel()
		}
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
	c.workers.Add(workers)
	c.mu.Unlock()
	if older != nil {
		c.fin.supersede(older, r)
	}
	if c.allOrdered {
		// Pipelined: no goroutine per master; each reply is handled on
		// its connection's reader. Commands to one master go out in the
		// order they are submitted, so nothing needs chaining.
		w := &r.wireBuf
		r.wireInto(w, op, r.argBuf[:])
		r.send(w, nil)
		return r, nil
	}
	for i := range c.masters {
		go r.work(i, prev)
	}
	return r, nil
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

// roundReq is one master's share of a round on an Ordered transport: the
// command and what its reply needs. A round holds them, so sending a
// command allocates nothing.
type roundReq struct {
	cmd Command
	r   *round
	i   int
	w   *wireCmd
	// settle gets the master's vote; nil means the round's own settle.
	settle func(i int, v vote, err error)
}

// inlineMasters is how many masters' requests a round holds without a
// further allocation.
const inlineMasters = 7

// send submits w to every master for which skip is nil or false, on the
// Ordered transports; settle (nil: the round's own) gets each vote.
func (r *round) send(w *wireCmd, settle func(i int, v vote, err error), skip ...bool) {
	n := len(r.c.masters)
	var reqs []roundReq
	if settle == nil && n <= inlineMasters {
		reqs = r.reqBuf[:n]
	} else {
		reqs = make([]roundReq, n)
	}
	for i := range reqs {
		if len(skip) > 0 && skip[i] {
			continue
		}
		q := &reqs[i]
		*q = roundReq{r: r, i: i, w: w, settle: settle}
		w.fill(&q.cmd, r)
		q.cmd.to = q
		r.c.masters[i].t.Send(&q.cmd)
	}
}

// complete handles master q.i's reply. (A script's NOSCRIPT is the
// transport's: see muxConn.noScript.) A request the transport re-sent
// after the master closed the connection gets the same caution as exec's
// retry.
func (q *roundReq) complete(reply any, err error, info SendInfo) {
	w := q.w
	v, err := q.r.decode(q.i, w.op, w.want, reply, err)
	if err != nil && !info.Sent {
		q.r.fin.markUnsent(w.op, q.i)
	}
	if err != nil && finishes(w.op, q.r) {
		q.r.c.finishLater(q.r, q.i, w.op, err)
	}
	if info.Resent && err == nil && v == voteNo && w.op != opExtend {
		v, err = voteFail, fmt.Errorf("%s retried after a broken connection: the first try may have run", w.op)
	}
	q.settleVote(v, err)
}

func (q *roundReq) settleVote(v vote, err error) {
	if q.settle != nil {
		q.settle(q.i, v, err)
		return
	}
	q.r.settle(q.i, v, err)
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
		cmd.Script = scriptOf[w.script]
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

// settle reports master i's answer to the round, on a pipelined path.
func (r *round) settle(i int, v vote, err error) {
	m := &r.c.masters[i]
	if err != nil {
		err = r.c.nodeError(m, err)
		r.c.logFailure(r.op, r.key, m, err)
	}
	r.replies <- reply{index: i, vote: v, err: err}
	r.finish(i)
}

// rollbackPipelined undoes a failed acquisition on every master that
// granted it or might have (queued behind the SET on the same
// connection). The returned channel closes when the masters that granted
// it have answered the rollback.
func (r *round) rollbackPipelined(votes []vote) <-chan struct{} {
	c := r.c
	done := make(chan struct{})
	var granted atomic.Int32
	w := new(wireCmd)
	r.wireInto(w, opRollback, nil)
	votes = slices.Clone(votes)
	settle := func(i int, _ vote, err error) {
		if err != nil {
			m := &c.masters[i]
			c.logFailure(opRollback, r.key, m, c.nodeError(m, err))
		}
		if votes[i] == voteYes && granted.Add(-1) == 0 {
			close(done)
		}
		c.workers.Done()
	}
	skip := make([]bool, len(votes))
	sends := 0
	for i, v := range votes {
		skip[i] = v == voteNo
		if !skip[i] {
			sends++
		}
		if v == voteYes {
			granted.Add(1)
		}
	}
	c.mu.Lock()
	if c.closed && !r.held.Load() {
		// Close has failed or is failing the connections: nothing more
		// is sent, and the key expires at its TTL. (An acquisition still
		// held in Client.workers was counted before Close began: Close
		// waits for it, so its rollback goes out.)
		c.mu.Unlock()
		close(done)
		return done
	}
	c.workers.Add(sends)
	c.mu.Unlock()
	if granted.Load() == 0 {
		close(done)
	}
	r.send(w, settle, skip...)
	r.unhold()
	return done
}

// decide fixes the round's outcome and lets the workers act on it. A
// failed pipelined acquisition must then be rolled back
// (rollbackPipelined), which ends its hold on Client.Close.
func (r *round) decide(failed bool) {
	r.failed = failed
	if r.decided != nil {
		close(r.decided)
	}
	if !failed {
		r.unhold()
	}
}

// unhold ends a pipelined acquisition's extra count in Client.workers.
func (r *round) unhold() {
	if r.held.Swap(false) {
		r.c.workers.Done()
	}
}

// finish is run by each worker as it ends; the last one frees the round.
func (r *round) finish(i int) {
	if r.done != nil {
		close(r.done[i])
	}
	if r.running.Add(-1) == 0 && r.cancel != nil {
		r.cancel()
		r.c.mu.Lock()
		if r.c.releasing[r.key] == r {
			delete(r.c.releasing, r.key)
		}
		if r.chain != "" && r.c.chains[r.chain] == r {
			delete(r.c.chains, r.chain)
		}
		r.c.mu.Unlock()
	}
	r.c.workers.Done()
}

func (r *round) work(i int, prev *round) {
	defer r.finish(i)
	m := &r.c.masters[i]
	// Besides the round it follows, a reentrant owner's round follows a
	// retry of the owner's earlier release still in flight (finish.go).
	waits := [2]<-chan struct{}{nil, r.waitAfter(i)}
	if prev != nil {
		waits[0] = prev.done[i]
		if r.op == opCommit {
			// A fence commit follows the acquisition's SET on this
			// master, not its end (which waits for the decision).
			waits[0] = prev.answered[i]
		}
	}
	for _, wait := range waits {
		if wait == nil {
			continue
		}
		select {
		case <-wait:
		case <-r.ctx.Done():
			// The previous command on this master is still pending: the
			// master is slow or hung. Nothing was sent, so nothing needs
			// undoing.
			err := r.c.nodeError(m, fmt.Errorf("an earlier command on this key is still pending: %w", context.DeadlineExceeded))
			r.replies <- reply{index: i, vote: voteFail, err: err}
			if r.answered != nil {
				close(r.answered[i])
			}
			// The rounds chained after this one must still follow the
			// pending one: this worker ends (done[i]) only after it. Its
			// wait is bounded by that round's own bounds.
			for _, w := range waits {
				if w != nil {
					<-w
				}
			}
			if finishes(r.op, r) {
				// A release that never went out is sent later.
				r.c.finishLater(r, i, r.op, err)
			}
			return
		}
	}
	v, err := r.c.exec(r.ctx, m, r.op, r)
	if err != nil {
		r.c.logFailure(r.op, r.key, m, err)
		if finishes(r.op, r) {
			r.c.finishLater(r, i, r.op, err)
		}
	}
	r.replies <- reply{index: i, vote: v, err: err}
	if r.answered != nil {
		close(r.answered[i])
	}
	if r.op != opAcquire || v == voteNo {
		return
	}
	<-r.decided
	if !r.failed {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), r.c.timeout)
	defer cancel()
	if _, err := r.c.exec(rctx, m, opRollback, r); err != nil {
		r.c.logFailure(opRollback, r.key, m, err)
		r.c.finishLater(r, i, opRollback, err)
	}
}

// exec sends op of r to master m through its transport, bounded by
// ctx's deadline, and waits for the answer. An answer to a command the
// transport re-sent after the master closed the connection, which could
// hide the first try's effect, counts as unknown, not as a refusal.
func (c *Client) exec(ctx context.Context, m *master, op opKind, r *round) (v vote, err error) {
	defer c.backstopVote(m, &v, &err)
	w := new(wireCmd)
	r.wireInto(w, op, nil)
	q := &execReq{done: make(chan struct{})}
	w.fill(&q.cmd, r)
	q.cmd.Deadline, _ = ctx.Deadline()
	q.cmd.to = q
	if err := ctx.Err(); err != nil {
		r.fin.markUnsent(op, m.index)
		return voteFail, c.nodeError(m, err)
	}
	m.t.Send(&q.cmd)
	select {
	case <-q.done:
	case <-ctx.Done():
		// An Ordered transport may answer later; this caller has stopped
		// waiting.
		return voteFail, c.nodeError(m, ctx.Err())
	}
	v, err = r.decode(m.index, op, w.want, q.reply, q.err)
	if err != nil && !q.info.Sent {
		r.fin.markUnsent(op, m.index)
	}
	// SET NX finds our own key if the first try ran; a release or a
	// rollback finds nothing to delete.
	if q.info.Resent && err == nil && v == voteNo && op != opExtend {
		return voteFail, c.nodeError(m, fmt.Errorf("%s retried after a broken connection: the first try may have run", op))
	}
	return v, c.wrapNodeError(m, err)
}

// execReq is one command exec waits for.
type execReq struct {
	cmd   Command
	done  chan struct{}
	reply any
	err   error
	info  SendInfo
}

func (q *execReq) complete(reply any, err error, info SendInfo) {
	q.reply, q.err, q.info = reply, err, info
	close(q.done)
}

func (c *Client) wrapNodeError(m *master, err error) error {
	if err == nil {
		return nil
	}
	return c.nodeError(m, err)
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
