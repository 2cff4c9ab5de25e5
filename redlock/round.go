package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
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
	cancel   context.CancelFunc
	running  atomic.Int32 // workers still running; the last one frees the round

	replies chan reply
	decided chan struct{}   // pooled path only
	failed  bool            // written before decided is closed
	done    []chan struct{} // pooled path only: done[i] closes when worker i has finished
	// Pooled path, fenced acquisitions only: answered[i] closes when
	// master i has answered (or the worker gave up), for the fence commit.
	answered []chan struct{}

	// Pipelined path only: the round's command and its per-master
	// requests, held here so that a round is one allocation.
	wireBuf wireCmd
	argBuf  [12]any
	reqBuf  [inlineMasters]roundReq
}

// startRound starts one worker per master. Commands that must not pass
// each other on a master are chained: worker i of a round sends nothing
// before worker i of the round it follows has finished. A lock's extension
// and release follow its acquisition (after), so a release cannot overtake
// the SET it undoes; an acquisition follows the client's latest release of
// the key still in flight, so a client that releases and locks again does
// not find its own old token on the masters that were slow to delete it.
// The wait is bounded by the round's own deadline.
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
	if !c.allMux {
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
	prev := after
	if !c.allMux {
		switch {
		case op == opAcquire && prev == nil:
			prev = c.releasing[key]
		case op == opRelease:
			c.releasing[key] = r
		}
	}
	c.workers.Add(n)
	c.mu.Unlock()
	if c.allMux {
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

// roundReq is one master's share of a round on a pipelined connection:
// the request and what its reply needs. A round holds them, so sending a
// command allocates nothing.
type roundReq struct {
	req     muxReq
	r       *round
	i       int
	w       *wireCmd
	retried bool
	// settle gets the master's vote; nil means the round's own settle.
	settle func(i int, v vote, err error)
}

// inlineMasters is how many masters' requests a round holds without a
// further allocation.
const inlineMasters = 7

// send submits w to every master for which skip is nil or false, on the
// pipelined connections; settle (nil: the round's own) gets each vote.
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
		*q = roundReq{req: muxReq{cmd: w.cmd, args: w.args}, r: r, i: i, w: w, settle: settle}
		q.req.to = q
		r.c.muxes[i].submit(&q.req)
	}
}

// deliver handles master q.i's reply. A script's NOSCRIPT (its cache was
// flushed) is answered once by EVAL of the source; a connection the master
// had closed (it restarted) is answered once by a retry on a new one, with
// the same caution as exec.
func (q *roundReq) deliver(reply any, err error) {
	w, mx := q.w, q.r.c.muxes[q.i]
	if w.script != nil && scripts.IsNoScript(err) {
		evalArgs := slices.Clone(w.args)
		evalArgs[0] = w.script.Source()
		mx.submit(&muxReq{cmd: "EVAL", args: evalArgs, to: replyFunc(func(reply any, err error) {
			v, err := q.r.decode(q.i, w.op, reply, err)
			q.settleVote(v, err)
		})})
		return
	}
	if err != nil && brokenConn(err) && !q.retried {
		q.retried = true
		mx.submit(&q.req)
		return
	}
	v, err := q.r.decode(q.i, w.op, reply, err)
	if q.retried && err == nil && v == voteNo && w.op != opExtend {
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

// wireCmd is an operation's command as a pipelined connection sends it:
// built once per round and shared, read-only, by every master.
type wireCmd struct {
	op     opKind
	script *scripts.Script // nil for a plain command
	cmd    string          // "EVALSHA", or the plain command
	args   []any
}

// wireInto builds op's command into w, its arguments in buf when it has
// room, after two slots kept for EVALSHA's script hash and key count.
func (r *round) wireInto(w *wireCmd, op opKind, buf []any) {
	if cap(buf) < 2 {
		buf = make([]any, 0, 12)
	}
	script, cmd, args := r.command(op, buf[2:2])
	if script == nil {
		*w = wireCmd{op: op, cmd: cmd, args: args}
		return
	}
	full := buf[:2+len(args)]
	if len(args) > 0 && &args[0] != &full[2] { // command outgrew buf
		full = script.AppendArgsKeys(make([]any, 0, 2+len(args)), r.nkeys(script), args...)
	} else {
		script.PrefixArgs(full, r.nkeys(script))
	}
	*w = wireCmd{op: op, script: script, cmd: "EVALSHA", args: full}
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
	var granted sync.WaitGroup
	w := new(wireCmd)
	r.wireInto(w, opRollback, nil)
	votes = slices.Clone(votes)
	settle := func(i int, _ vote, err error) {
		if err != nil {
			m := &c.masters[i]
			c.logFailure(opRollback, r.key, m, c.nodeError(m, err))
		}
		if votes[i] == voteYes {
			granted.Done()
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
	c.workers.Add(sends)
	c.mu.Unlock()
	r.send(w, settle, skip...)
	go func() {
		granted.Wait()
		close(done)
	}()
	return done
}

// decide fixes the round's outcome and lets the workers act on it.
func (r *round) decide(failed bool) {
	r.failed = failed
	if r.decided != nil {
		close(r.decided)
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
		r.c.mu.Unlock()
	}
	r.c.workers.Done()
}

func (r *round) work(i int, prev *round) {
	defer r.finish(i)
	m := &r.c.masters[i]
	if prev != nil {
		wait := prev.done[i]
		if r.op == opCommit {
			// A fence commit follows the acquisition's SET on this
			// master, not its end (which waits for the decision).
			wait = prev.answered[i]
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
			return
		}
	}
	v, err := r.c.exec(r.ctx, m, r.op, r)
	if err != nil {
		r.c.logFailure(r.op, r.key, m, err)
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
	}
}

// exec sends one command to one master, bounded by ctx's deadline. A
// pooled connection that the master closed (it restarted, or dropped idle
// clients) fails at its first use; exec then tries once more on a fresh
// connection within the same deadline. An answer to that second try that
// could hide the first try's effect counts as unknown, not as a refusal.
func (c *Client) exec(ctx context.Context, m *master, op opKind, r *round) (vote, error) {
	v, err := c.execOnce(ctx, m, op, r, false)
	if err == nil || !brokenConn(err) {
		return v, c.wrapNodeError(m, err)
	}
	// The other idle connections are likely as stale: retry on a fresh one.
	v, err2 := c.execOnce(ctx, m, op, r, true)
	if err2 != nil {
		return voteFail, c.wrapNodeError(m, err2)
	}
	// SET NX finds our own key if the first try ran; a release or a
	// rollback finds nothing to delete.
	if v == voteNo && op != opExtend {
		return voteFail, c.nodeError(m, fmt.Errorf("%s retried after %v: the first try may have run", op, err))
	}
	return v, nil
}

func (c *Client) wrapNodeError(m *master, err error) error {
	if err == nil {
		return nil
	}
	return c.nodeError(m, err)
}

// brokenConn reports whether err says the connection was already closed
// by the other side, before the command could have been read.
func brokenConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed)
}

// execOnce sends one command; fresh asks for a newly dialed connection
// rather than an idle one of the pool, where the pool can dial.
func (c *Client) execOnce(ctx context.Context, m *master, op opKind, r *round, fresh bool) (vote, error) {
	var conn redis.Conn
	if mx := c.muxes[m.index]; mx != nil {
		conn = muxHandle{mx: mx, ctx: ctx}
	} else {
		var err error
		if d, ok := m.pool.(dialer); fresh && ok {
			conn, err = d.Dial(ctx)
		} else {
			conn, err = m.pool.GetContext(ctx)
		}
		if err != nil {
			return voteFail, err
		}
		defer conn.Close()
	}
	timeout := c.timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		return voteFail, context.DeadlineExceeded
	}
	script, cmd, args := r.command(op, nil)
	var res any
	var err error
	if script != nil {
		res, err = script.DoKeys(conn, timeout, r.nkeys(script), args...)
	} else {
		res, err = redis.DoWithTimeout(conn, timeout, cmd, args...)
	}
	return r.decode(m.index, op, res, err)
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

// decode turns master i's reply to op into its vote; a fenced
// acquisition's counter goes to r.counters[i].
func (r *round) decode(i int, op opKind, res any, err error) (vote, error) {
	if err != nil {
		err = scripts.Explain(err)
	}
	if b, ok := res.([]byte); ok && err == nil && op == opAcquire && r.counters != nil {
		n, perr := strconv.ParseUint(string(b), 10, 64)
		if perr != nil || n >= maxFence {
			return voteFail, fmt.Errorf("fencing counter %s out of range", describe(res))
		}
		r.counters[i] = n
		return voteYes, nil
	}
	return decode(op, res, err)
}

// decode turns a master's reply to op into its vote.
func decode(op opKind, res any, err error) (vote, error) {
	if err != nil {
		return voteFail, err
	}
	switch res {
	case "OK":
		if op == opAcquire {
			return voteYes, nil
		}
	case nil:
		if op == opAcquire {
			return voteNo, nil
		}
	case int64(1):
		return voteYes, nil
	case int64(0):
		return voteNo, nil
	}
	return voteFail, fmt.Errorf("unexpected reply %s to %s", describe(res), op)
}

// nodeError names the master and turns the many shapes of a timeout into
// ErrMasterTimeout, so that errors.Is(err, context.DeadlineExceeded) stays
// true only when the caller's own context expired.
func (c *Client) nodeError(m *master, err error) *NodeError {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		err = fmt.Errorf("%w (%v): %s", ErrMasterTimeout, c.timeout, err.Error())
	}
	return &NodeError{Index: m.index, Addr: m.addr, Err: err}
}

func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil"
	case []byte:
		if len(v) > 32 {
			v = v[:32]
		}
		return strconv.Quote(string(v))
	default:
		return fmt.Sprintf("%T(%v)", v, v)
	}
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
