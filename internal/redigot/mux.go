package redigot

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/transport"
)

// Pipelining (WithPipelining, on by default).
//
// A mux carries the commands of every goroutine of a client bound for one
// master over one connection: a writer goroutine takes what is queued and
// writes it in one pass (one flush), and a reader goroutine reads the
// replies, which come in the same order, and hands each to its caller.
// Concurrent lock operations thus cost the master and the client one write
// and one read per batch, not per command. Each caller still waits only
// until its own deadline; a reply that comes later is dropped. The scripts
// are loaded on every new connection before it carries EVALSHA; a
// NOSCRIPT anyway is answered by EVAL only where that keeps the order
// (noScript).
//
// Every reply is checked against what its command can return (expect); one
// that does not fit means the connection is out of step (a stray reply),
// and it is failed. So is a connection whose oldest unanswered command is
// older than the stall bound. When a connection fails, its reader alone
// settles everything it still carried, in the order it was submitted:
// written and unanswered, then unwritten. When the master closed the
// connection (EOF, reset), nothing more of it runs there, so each of these
// is re-sent once, in that order, ahead of anything submitted since;
// otherwise (a stall, a stray reply, Close) the master may still run what
// it read, so nothing is re-sent and each fails as unknown.
//
// A connection whose master has been silent for longer than the
// per-master timeout — a command awaits its reply, and the reader has read
// none for that long (silence) — is down: the master is hung or far
// behind, and whatever is sent now waits behind that command. Acquisitions and
// extensions submitted meanwhile fail at once, unsent, as a timeout would
// fail them (see muxConn.down); releases and rollbacks are still queued,
// since they are worth running late. The connection is up again as soon
// as the master answers, and broken at the stall bound if it never does.

// muxQueue bounds the commands waiting for the writer: beyond it callers
// fail at once rather than queue behind a master that does not read.
const muxQueue = 4096

// muxUndo is the room kept in the queue beyond muxQueue for commands that
// undo one already on the connection (a failed attempt's rollback, a fair
// waiter's leave): refused, they would leave the key (or the queue entry)
// until its TTL, since what they undo still runs. It covers one for each
// command the connection can carry unanswered (queued and written).
const muxUndo = 2*muxQueue + muxBatch

// muxBatch bounds the commands written in one pass.
const muxBatch = 256

var errMuxBusy = errors.New("too many commands queued for this master")

// mux is the pipelined redigo Transport of one master (Ordered): it owns
// its connections and goroutines, and Close ends them.
type mux struct {
	addr    string
	pool    pool.Pool // the master's pool: Client.Inspect's connections (Inspector)
	dial    pool.Dialer
	redact  func(error) error // the pool's redaction of credentials, or nil
	timeout time.Duration     // the client's per-master timeout: dials, the down and stall bounds
	stalls  *stall.Stalls     // the client's stall detector (nil: no stall is seen)

	wg sync.WaitGroup // the dialer, and every connection's reader and writer

	// life ends when Close begins, and with it a dial in progress (the
	// TCP connect, a TLS handshake, the SCRIPT LOADs). Made with the
	// first dial (under mu); endLife ends it.
	life    context.Context
	endLife context.CancelFunc

	ownReads atomic.Int64 // replies read by their caller (readOwn), for tests

	mu     sync.Mutex
	closed bool                  // Close began: no dial, no command
	conns  map[*muxConn]struct{} // live connections, failed by Close
	cur    *muxConn              // the connection; while it fails, the one being settled
	// dialing is set while a dial runs or waits for cur to be settled; it
	// is closed when the dial ends.
	dialing chan struct{}
	backlog []*muxReq // submitted while no connection was live, in order
	dialErr error     // the last dial's failure
	failAt  time.Time // when it failed
}

// redialDelay spaces dials to a master whose last dial failed: meanwhile
// commands to it fail at once. (A stopped master accepts connections
// without ever answering; dialing it on every command would fill its
// accept queue.)
func (mx *mux) redialDelay() time.Duration {
	d := 10 * mx.timeout
	if d > time.Second {
		d = time.Second
	}
	return d
}

type muxReq struct {
	cmd  string
	args []any
	// script, for an EVALSHA, is its script: a NOSCRIPT reply is answered
	// by EVAL of its source when that keeps the order, or when late is
	// set: the command may run after commands submitted after it (see
	// noScript).
	script *transport.Script
	want   transport.ReplyShape // what the reply may be, besides an error reply
	late   bool
	// undo: it undoes a command submitted before it (a rollback, a
	// leave); it may use the queue's room beyond muxQueue (muxUndo).
	undo bool
	// resend: when the master closes the connection before answering, the
	// mux sends the request once more on the next one (resent then says
	// so). Requests whose caller retries by itself leave it false.
	resend, resent bool
	// drop: while the connection is down, fail it at once, unsent (its
	// caller cannot use a late reply).
	drop bool
	sent time.Time // when it was written (the writer's)
	// to receives the reply, exactly once, on the reader's goroutine (or
	// whichever fails the request); it must not block. A round's requests
	// are part of the round, and to is the round's own per-master state, so
	// that sending a command allocates nothing.
	to replier
}

// fill makes r the request that sends cmd, its reply to to.
func (r *muxReq) fill(cmd *transport.Command, to replier) {
	*r = muxReq{cmd: cmd.Name, args: cmd.WireArgs(), want: cmd.Reply, late: cmd.MayRunLate, undo: cmd.Undo,
		resend: cmd.Resend, drop: cmd.DropWhenDown, to: to}
	if cmd.Script != nil {
		r.cmd, r.script = "EVALSHA", cmd.Script
	}
}

// cmdReq is the request that carries a Command. The mux owns it: it is
// taken from cmdReqs when the command is sent and put back as its reply
// is delivered, so that sending a command allocates nothing.
type cmdReq struct {
	muxReq
	c *transport.Command
}

var cmdReqs = sync.Pool{New: func() any { return new(cmdReq) }}

// deliver completes the command (replier). No code of the mux touches a
// request after delivering it, so it is reused from here on.
func (q *cmdReq) deliver(v any, err error) {
	if re, ok := replyTo(err); ok {
		err = transport.ReplyError(re)
	} else {
		err = answered(err)
	}
	cmd, info := q.c, transport.SendInfo{Sent: !q.sent.IsZero(), Resent: q.resent}
	*q = cmdReq{}
	cmdReqs.Put(q)
	cmd.Complete(v, err, info)
}

// replier receives a pipelined command's reply.
type replier interface {
	deliver(v any, err error)
}

// replyFunc is a replier for the paths off the hot one.
type replyFunc func(v any, err error)

func (f replyFunc) deliver(v any, err error) { f(v, err) }

type muxConn struct {
	mx      *mux
	nc      redis.Conn
	stall   time.Duration // the stall bound
	queue   chan *muxReq  // waiting for the writer
	kick    chan struct{} // size 1: the queue has work
	pending chan *muxReq  // written, awaiting replies in order
	closed  chan struct{}
	err     error // why it closed; set before closed is closed

	// born is when the connection was made; oldest is when the command
	// the reader waits for was written, as 1 + nanoseconds since born,
	// or 0 while the reader waits for none; heard is when the reader last
	// read a reply, alike (0: never). See silence.
	born   time.Time
	oldest atomic.Int64
	heard  atomic.Int64

	// qmu orders closing with queueing: once closed, nothing joins the
	// queue, so the reader finds all of it.
	qmu sync.Mutex

	batch []*muxReq // the writer's

	// wmu serializes writing with handing the written requests to the
	// reader, so replies and requests pair up in order.
	wmu    sync.Mutex
	unsent []*muxReq // taken for writing but not handed to the reader, in order (under wmu)

	settled bool // the reader has settled what it carried (under mx.mu)

	// unanswered counts the requests written and not yet answered (read
	// by whoever reads: the reader, or a caller reading its own reply).
	// It goes up under wmu, as each is written.
	unanswered atomic.Int64

	// Reading its own reply (readOwn): a caller that wrote to an idle
	// connection may read the reply itself, saving the hand-offs to and
	// from the reader goroutine. rw waits for a reply to arrive whole
	// without consuming it (nil: the connection cannot, and every reply
	// is the reader's). rmu is held by whoever reads the connection.
	// front is a request such a caller wrote and stopped waiting for:
	// the reader reads its reply before any other (under rmu), and
	// wakeReader (size 1) tells the reader so. held are requests the
	// reader took from pending but has not yet read, since front came
	// first (the reader's, under rmu).
	rw         pool.ReadWaiter
	rmu        sync.Mutex
	front      *muxReq
	wakeReader chan struct{}
	held       []*muxReq

	loading map[*transport.Script]bool // SCRIPT LOADs sent after a NOSCRIPT, unanswered (the reader's)
}

// dialerOf returns how to dial a connection of its own to the master
// behind p, outside the pool, for pipelining and subscribing: p's own Dial
// (pool.Dialer), or for a *redis.Pool its DialContext or Dial field, with
// the caller's dial settings (timeouts, AUTH, TLS, a guard of their own).
// It returns nil for a pool that can do neither: its commands take the
// pooled path, and a subscriber borrows a connection (dialDedicated).
func dialerOf(p pool.Pool) pool.Dialer {
	switch p := p.(type) {
	case pool.Dialer:
		return p
	case *redis.Pool:
		if p.DialContext != nil || p.Dial != nil {
			return redigoDialer{p}
		}
	}
	return nil
}

// redigoDialer dials through a *redis.Pool's own dial function, as its
// GetContext would, but for a connection the pool does not count or lend.
// A Dial field without a context is bounded by its own settings alone
// (redis.DialConnectTimeout), as it is in the pool.
type redigoDialer struct{ p *redis.Pool }

func (d redigoDialer) Dial(ctx context.Context) (redis.Conn, error) {
	if d.p.DialContext != nil {
		return d.p.DialContext(ctx)
	}
	return d.p.Dial()
}

// startDialLocked starts the dialer unless one runs or waits (mx.dialing
// closes when it ends). While the current connection is being settled,
// the dial waits: its reader starts it once what the connection carried
// is in the backlog, in order.
func (mx *mux) startDialLocked() error {
	if mx.dialing != nil {
		return nil
	}
	if mx.closed {
		return transport.ErrClosed
	}
	if mx.dialErr != nil && time.Since(mx.failAt) < mx.redialDelay() {
		return &transport.NotSentError{Since: mx.failAt, Why: "its last dial failed", Err: mx.dialErr}
	}
	mx.wg.Add(1)
	ch := make(chan struct{})
	mx.dialing = ch
	if mx.life == nil {
		mx.life, mx.endLife = context.WithCancel(context.Background())
	}
	if mx.cur == nil {
		go mx.dialer(ch)
	}
	return nil
}

// dialer makes a new connection, bounded by the per-master timeout, and
// hands it the backlog, in order, before anything else can reach it.
func (mx *mux) dialer(ch chan struct{}) {
	defer mx.wg.Done()
	var mc *muxConn
	var err error
	for try := 1; ; try++ {
		start := time.Now()
		ctx, cancel := context.WithTimeout(mx.life, mx.timeout)
		mc, err = mx.connect(ctx)
		cancel()
		if err == nil || try == DialTries || !stalledDial(mx.stalls, err, start) {
			break
		}
	}
	mx.mu.Lock()
	if err == nil && mc.settled {
		err = mc.err // it failed before it could be used
	}
	if err != nil && mx.closed {
		err = transport.ErrClosed // Close ended the dial
	}
	var failed []*muxReq
	if err == nil {
		mx.cur = mc
		mx.backlog, failed = mc.takeBacklog(mx.backlog)
	} else {
		failed, mx.backlog = mx.backlog, nil
		mx.failAt = time.Now()
	}
	mx.dialErr = err
	mx.dialing = nil
	mx.mu.Unlock()
	close(ch)
	if err == nil {
		err = errMuxBusy
	} else if !errors.Is(err, transport.ErrClosed) {
		// The backlog was never sent: its commands waited for this dial,
		// maybe a moment, not the per-master timeout.
		err = &transport.NotSentError{Since: time.Now(), Why: "its dial failed", Err: err}
	}
	for _, r := range failed {
		r.to.deliver(nil, err)
	}
}

// DialTries bounds the dials one dialer makes when a dial timed out
// while this process stalled (stalledDial).
const DialTries = 3

// stalledDial reports whether a dial that began at start failed with err
// for a stall of this process rather than for the master: it ran out of
// time, and this process did not run for a part of that time (a timer of
// it fired late, or the round beat is overdue now). The master then had
// less than the per-master timeout to answer, maybe none: the dialer
// dials again at once (up to DialTries in all) rather than count the
// master down, which would fail every command to it, unsent, for the
// redial delay. (A client stopped for 150 ms during its first dials
// failed some 1,600 acquisitions in 2 s so, every master up.)
func stalledDial(s *stall.Stalls, err error, start time.Time) bool {
	var ne net.Error
	if !errors.Is(err, context.DeadlineExceeded) && (!errors.As(err, &ne) || !ne.Timeout()) {
		return false
	}
	now := time.Now()
	return s.In(now, now.Sub(start)) > 0 || s.Behind() > time.Millisecond
}

func (mx *mux) connect(ctx context.Context) (*muxConn, error) {
	mx.mu.Lock()
	closed := mx.closed
	mx.mu.Unlock()
	if closed {
		return nil, transport.ErrClosed
	}
	var nc redis.Conn
	var rw pool.ReadWaiter
	var err error
	if wd, ok := mx.dial.(pool.WaitDialer); ok {
		nc, rw, err = wd.DialWaiter(ctx)
	} else {
		nc, err = mx.dial.Dial(ctx)
	}
	if err != nil {
		return nil, err
	}
	// The reads below heed a deadline, not ctx: ctx's end (Close ends
	// mx.life) closes the connection, so that Close does not wait out the
	// handshake of a master that does not answer.
	cut := context.AfterFunc(ctx, func() { nc.Close() })
	// Load the scripts first: a NOSCRIPT in the middle of a pipeline would
	// cost the caller a second round trip. Each reply must be the script's
	// own hash.
	all := scripts.All
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(mx.timeout)
	}
	for _, s := range all {
		if err = nc.Send("SCRIPT", "LOAD", s.Source()); err != nil {
			break
		}
	}
	if err == nil {
		err = nc.Flush()
	}
	for _, s := range all {
		if err != nil {
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
			err = context.DeadlineExceeded
			break
		}
		var v any
		v, err = receive(nc, left)
		if b, ok := v.([]byte); err == nil && (!ok || string(b) != s.SHA()) {
			err = &fault.DesyncError{Cmd: "SCRIPT LOAD", Reply: fault.Describe(v)}
		}
	}
	if !cut() && err == nil {
		err = ctx.Err() // ended as the handshake did: the connection is closed
	}
	if err != nil {
		nc.Close()
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		}
		return nil, err
	}
	mc := &muxConn{mx: mx, nc: nc, stall: stallBound(mx.timeout), queue: make(chan *muxReq, muxQueue+muxUndo), kick: make(chan struct{}, 1),
		pending: make(chan *muxReq, muxQueue+muxBatch), closed: make(chan struct{}),
		batch: make([]*muxReq, 0, muxBatch+1), born: time.Now(), rw: rw, wakeReader: make(chan struct{}, 1)}
	mx.mu.Lock()
	if mx.closed {
		mx.mu.Unlock()
		nc.Close()
		return nil, transport.ErrClosed
	}
	mx.wg.Add(2)
	if mx.conns == nil {
		mx.conns = map[*muxConn]struct{}{}
	}
	mx.conns[mc] = struct{}{}
	mx.mu.Unlock()
	go mc.write()
	go mc.read()
	return mc, nil
}

func (mc *muxConn) isClosed() bool {
	select {
	case <-mc.closed:
		return true
	default:
		return false
	}
}

// fail closes the connection for err (the first cause wins); its reader
// then settles what it carried. A write or read that met the socket
// closed (net.ErrClosed) while this connection was still open met
// redigo's own close, which it makes as it fails a read or write: that
// failure (the reader's EOF when the master closed the connection, say)
// is the cause, whichever goroutine reaches fail first.
func (mc *muxConn) fail(err error) {
	if errors.Is(err, net.ErrClosed) {
		if first := mc.nc.Err(); first != nil && !errors.Is(first, net.ErrClosed) {
			err = first
		}
	}
	mc.qmu.Lock()
	first := !mc.isClosed()
	if first {
		mc.err = err
		close(mc.closed)
	}
	mc.qmu.Unlock()
	if first {
		mc.nc.Close() // unblocks the reader and the writer
	}
}

func (mc *muxConn) write() {
	defer mc.mx.wg.Done()
	for {
		select {
		case <-mc.kick:
		case <-mc.closed:
			return
		}
		mc.writeBatch()
	}
}

// writeBatch writes what is queued, in order, in one pass.
func (mc *muxConn) writeBatch() {
	mc.wmu.Lock()
	defer mc.wmu.Unlock()
	if mc.isClosed() {
		return
	}
	batch := mc.take(mc.batch[:0])
	if len(batch) > 0 && len(batch) < muxBatch {
		// Let callers that are ready to run submit theirs first: one
		// write then carries them all (design.md, "Pipelining").
		runtime.Gosched()
		batch = mc.take(batch)
	}
	if len(batch) == muxBatch {
		mc.poke() // more may be queued
	}
	now := time.Now()
	for i, q := range batch {
		err := mc.nc.Send(q.cmd, q.args...)
		if err == nil {
			q.sent = now
			mc.unanswered.Add(1)
			select {
			case mc.pending <- q:
				continue
			case <-mc.closed:
			}
		} else {
			mc.fail(err)
		}
		// What was not handed to the reader goes back to it in order.
		mc.unsent = append(mc.unsent, batch[i:]...)
		break
	}
	if !mc.isClosed() && len(batch) > 0 {
		if err := mc.nc.Flush(); err != nil {
			mc.fail(err)
		}
	}
	clear(batch)
	mc.batch = batch[:0]
}

// take appends what is queued to batch, up to muxBatch, without waiting.
func (mc *muxConn) take(batch []*muxReq) []*muxReq {
	for len(batch) < muxBatch {
		select {
		case q := <-mc.queue:
			batch = append(batch, q)
		default:
			return batch
		}
	}
	return batch
}

func (mc *muxConn) poke() {
	select {
	case mc.kick <- struct{}{}:
	default:
	}
}

// stallBound is how long a connection waits for its oldest reply before
// it counts as stalled: ten per-master timeouts, at least a second.
func stallBound(timeout time.Duration) time.Duration {
	return max(10*timeout, time.Second)
}

// stallError is the cause of a connection broken because its oldest
// unanswered command waited longer than the stall bound.
type stallError struct{ d time.Duration }

func (e *stallError) Error() string {
	return fmt.Sprintf("no reply for %v to the oldest command on the connection: broken", e.d)
}

func (mc *muxConn) read() {
	defer mc.mx.wg.Done()
	defer func() {
		mc.mx.mu.Lock()
		delete(mc.mx.conns, mc)
		mc.mx.mu.Unlock()
	}()
	for {
		var r *muxReq
		select {
		case r = <-mc.pending:
		case <-mc.wakeReader: // a caller handed its request back (front)
		case <-mc.closed:
			mc.rmu.Lock()
			first := mc.takeFront()
			mc.rmu.Unlock()
			mc.settle(first)
			return
		}
		mc.rmu.Lock()
		if f := mc.takeFront(); f != nil {
			if r != nil {
				mc.held = append(mc.held, r)
			}
			r = f
		}
		for r != nil {
			if mc.isClosed() {
				// A caller reading its own reply failed the connection
				// and handed the request back: nothing more is read.
				mc.rmu.Unlock()
				mc.settle(r)
				return
			}
			if failed := mc.readOne(r); failed {
				mc.rmu.Unlock()
				mc.settle(r)
				return
			}
			r = nil
			if len(mc.held) > 0 {
				r = mc.held[0]
				mc.held[0] = nil
				mc.held = mc.held[1:]
			}
		}
		mc.rmu.Unlock()
	}
}

// takeFront returns the request a caller handed back, if any (under rmu).
func (mc *muxConn) takeFront() *muxReq {
	f := mc.front
	mc.front = nil
	return f
}

// readOne reads r's reply and delivers it, with rmu held: r is the oldest
// request unanswered. It reports whether the connection failed (r is then
// the request being read, for settle).
func (mc *muxConn) readOne(r *muxReq) (failed bool) {
	// The oldest unanswered request bounds the wait.
	mc.oldest.Store(1 + int64(r.sent.Sub(mc.born)))
	left := mc.stall - time.Since(r.sent)
	if left <= 0 {
		mc.fail(&stallError{mc.stall})
		return true
	}
	v, err := receive(mc.nc, left)
	mc.heard.Store(1 + int64(time.Since(mc.born)))
	mc.oldest.Store(0)
	mc.unanswered.Add(-1)
	if _, isReply := replyTo(err); isReply {
		if r.script != nil && IsNoScript(err) {
			err = mc.noScript(r, err)
			if err == nil {
				return false // r went again, as EVAL
			}
		}
		r.to.deliver(nil, err) // any command may get an error reply
		return false
	}
	if err == nil && !r.want.Fits(v) {
		err = &fault.DesyncError{Cmd: r.cmd, Reply: fault.Describe(v)}
	}
	if err != nil {
		mc.fail(err)
		return true
	}
	r.to.deliver(v, nil)
	return false
}

// readOwn writes r and reads its reply in the caller, when the
// connection is idle (nothing queued, nothing unanswered, nobody writing
// or reading) and can wait for a reply without consuming it (rw). A lone
// master's round (N=1) asks for it: the caller would only wait for the
// reply anyway, and reading it here saves the hand-off to the reader
// goroutine and back (on a machine with idle CPUs, each wakes another
// thread). The caller waits until deadline or ctx's end for the whole
// reply to arrive (not only its first bytes: then its read would wait for
// the rest past both, up to the stall bound); then it hands r back to the reader goroutine, which
// reads the reply whenever it comes, as it reads every other (front).
// So stopping the wait never breaks the connection, and a late reply
// still counts as it would have. It reports whether it took r.
func (mc *muxConn) readOwn(ctx context.Context, deadline time.Time, r *muxReq) bool {
	if mc.rw == nil || len(mc.queue) > 0 || mc.unanswered.Load() != 0 || !mc.wmu.TryLock() {
		return false
	}
	if len(mc.queue) > 0 || mc.unanswered.Load() != 0 || mc.isClosed() || !mc.rmu.TryLock() {
		mc.wmu.Unlock()
		return false
	}
	// rmu is held until r is answered or handed back.
	if err := mc.nc.Send(r.cmd, r.args...); err != nil {
		mc.fail(err)
		mc.unsent = append(mc.unsent, r) // the reader settles it
		mc.rmu.Unlock()
		mc.wmu.Unlock()
		return true
	}
	r.sent = time.Now()
	mc.unanswered.Add(1)
	err := mc.nc.Flush()
	mc.wmu.Unlock()
	if err != nil {
		mc.fail(err)
		mc.handBack(r) // the reader settles it, first
		return true
	}
	mc.oldest.Store(1 + int64(r.sent.Sub(mc.born)))
	if err := mc.rw.WaitReadable(ctx, deadline); err != nil {
		mc.handBack(r)
		return true
	}
	if failed := mc.readOne(r); failed {
		mc.handBack(r) // the reader settles it, first
		return true
	}
	mc.rmu.Unlock()
	mc.mx.ownReads.Add(1)
	return true
}

// handBack gives the reading of r's reply, and rmu, to the reader.
func (mc *muxConn) handBack(r *muxReq) {
	mc.front = r
	mc.rmu.Unlock()
	select {
	case mc.wakeReader <- struct{}{}:
	default:
	}
}

// noScript runs on the reader when r, an EVALSHA, got NOSCRIPT (the
// master's script cache was flushed): r did not run. When nothing was
// written or queued behind r, r is written again at once as EVAL of the
// script's source, still next on the connection, and noScript returns nil.
// Otherwise commands submitted after r have reached the master already,
// and may have run (their scripts may be cached again): running r now
// would run it after them — an acquisition after its own rollback or
// release, which would leave the key until its TTL. So r is re-run as
// EVAL behind them only when it may run late (r.late: a release, rollback,
// extension or leave of a token no later command uses: late, it finds
// nothing or its own key); else r fails (it did not run), and a SCRIPT
// LOAD, queued behind, puts the script back for what comes next.
func (mc *muxConn) noScript(r *muxReq, err error) error {
	evalOf := func(r *muxReq) {
		args := slices.Clone(r.args) // shared with the round's other masters
		args[0] = r.script.Source()
		r.cmd, r.args, r.script = "EVAL", args, nil
	}
	// Nothing written behind r is unanswered, and nothing is queued: r is
	// still next. (Not len(pending): the reader may hold requests taken
	// from it, and a caller reading its own reply may have written one.)
	if len(mc.queue) == 0 && mc.unanswered.Load() == 0 && mc.wmu.TryLock() {
		idle := len(mc.queue) == 0 && mc.unanswered.Load() == 0 && !mc.isClosed()
		if idle {
			evalOf(r)
			if err := mc.nc.Send(r.cmd, r.args...); err != nil {
				mc.fail(err)
				mc.unsent = append(mc.unsent, r) // the reader settles it
			} else {
				r.sent = time.Now()
				mc.unanswered.Add(1)
				mc.pending <- r // never full: it was empty
				if err := mc.nc.Flush(); err != nil {
					mc.fail(err) // the reader settles r
				}
			}
		}
		mc.wmu.Unlock()
		if idle {
			return nil
		}
	}
	if r.late {
		evalOf(r)
		mc.mx.submit(r) // behind what was submitted so far
		return nil
	}
	s := r.script
	if !mc.loading[s] {
		if mc.loading == nil {
			mc.loading = map[*transport.Script]bool{}
		}
		load := &muxReq{cmd: "SCRIPT", args: []any{"LOAD", s.Source()}, want: transport.ReplySHA}
		load.to = replyFunc(func(v any, err error) {
			delete(mc.loading, s) // on the reader, as every delivery here
			if b, ok := v.([]byte); err == nil && (!ok || string(b) != s.SHA()) {
				mc.fail(&fault.DesyncError{Cmd: "SCRIPT LOAD", Reply: fault.Describe(v)})
			}
		})
		if mc.enqueue(load) == nil {
			mc.loading[s] = true
		}
	}
	return fmt.Errorf("%w (the script cache was flushed, and commands sent after this one may have run: it is not run after them)", err)
}

// settle runs on the reader once the connection has failed: it takes
// everything the connection still carried, in the order it was submitted
// (first, the rest written, the rest taken for writing, the rest queued),
// and re-sends or fails it (see the top of this file).
func (mc *muxConn) settle(first *muxReq) {
	mc.wmu.Lock() // the writer has stopped: pending and unsent are final
	var all []*muxReq
	if first != nil {
		all = append(all, first)
	}
	mc.rmu.Lock() // whoever read has stopped: held is final
	all = append(all, mc.held...)
	mc.held = nil
	mc.rmu.Unlock()
	for len(mc.pending) > 0 {
		all = append(all, <-mc.pending)
	}
	all = append(all, mc.unsent...)
	mc.unsent = nil
	mc.wmu.Unlock()
	// closed: nothing joins the queue any more; taking qmu waits for a
	// sender that joined before the close was seen.
	mc.qmu.Lock()
	mc.qmu.Unlock() //nolint:staticcheck // SA2001: the critical section is the wait
	for len(mc.queue) > 0 {
		all = append(all, <-mc.queue)
	}
	cause := mc.err
	resend := all[:0:0]
	var failed []*muxReq
	for _, r := range all {
		if fault.BrokenConn(cause) && r.resend && !r.resent {
			r.resent = true
			resend = append(resend, r)
		} else {
			failed = append(failed, r)
		}
	}
	mx := mc.mx
	var dropped []*muxReq
	var dropErr error
	mx.mu.Lock()
	mc.settled = true
	// Ahead of what was submitted while this connection was settled.
	mx.backlog = append(resend, mx.backlog...)
	if mx.cur == mc {
		mx.cur = nil
		if mx.dialing != nil {
			go mx.dialer(mx.dialing) // it waited for this
		}
	}
	if len(mx.backlog) > 0 && mx.dialing == nil {
		if dropErr = mx.startDialLocked(); dropErr != nil {
			dropped, mx.backlog = mx.backlog, nil
		}
	}
	mx.mu.Unlock()
	for _, r := range failed {
		r.to.deliver(nil, cause)
	}
	for _, r := range dropped {
		r.to.deliver(nil, dropErr)
	}
}

// downError fails a command submitted while its connection is down (on
// the pooled path: while its master is, pooledTransport.downLocked): it
// was not sent.
type downError struct {
	d      time.Duration
	pooled bool
}

func (e *downError) Error() string {
	if e.pooled {
		return fmt.Sprintf("no reply from the master for over %v while commands await one", e.d)
	}
	return fmt.Sprintf("no reply on the connection for over %v while a command awaits one", e.d)
}

// Unwrap makes it a timeout (ErrMasterTimeout, once named by nodeError).
func (e *downError) Unwrap() error { return context.DeadlineExceeded }

// silence is how long the master has kept the reader waiting: since the
// later of when the command the reader waits for was written and when the
// reader last read a reply. It is 0 while the reader waits for no command
// — it has not yet taken the next one written, say because this process
// had no CPU for it — since then nothing is overdue on the master's
// account.
//
// It is measured from the reader's last progress, not from when the
// command now waited for was sent: under load a deep pipeline's oldest
// command may have been sent long ago while the master answers steadily,
// and a reader that this process's own scheduler kept from running (the
// CPUs busy with other work, 64 goroutines ahead of it) is no sign of a
// master that does not answer.
func (mc *muxConn) silence() time.Duration {
	o := mc.oldest.Load()
	if o == 0 {
		return 0
	}
	if h := mc.heard.Load(); h > o {
		o = h
	}
	return time.Since(mc.born) - time.Duration(o-1)
}

// down fails (a downError) when the master has been silent (silence) for
// longer than the per-master timeout. An acquisition sent now would
// wait behind it, and its caller would have given up before the reply
// came: when the master is hung (SIGSTOP), each would cost a write to a
// socket that nobody reads and grow the pile of commands — each holding
// its round — that is failed in one burst at the stall bound. On a master that answers again, the
// connection is up at once. Releases and rollbacks are not dropped: a
// master that was only slow still runs them, where dropping one would
// leave the key there until its TTL.
// The silence is the master's (blamed), not what this process's own
// stalls made of it.
func (mc *muxConn) down() error {
	d := mc.mx.timeout
	if s := mc.blamed(d); s > d {
		// down since the silence passed the timeout
		return &transport.NotSentError{Since: time.Now().Add(d - s), Err: &downError{d: d}}
	}
	return nil
}

// blamed is the silence (above d) that the master is to blame for. A
// process that did not run (a busy machine, SIGSTOP) read nothing, so every
// master looks silent when it runs again, and its rounds may start before
// its readers have run. So the latest stall this process saw is taken off
// (stalls.in), or how far this process is behind on its timers (stalls.behind:
// a stall whose end no timer has told of yet), whichever is more; and the
// master is not silent at all when a reply already waits unread in the
// socket (pool.ReplyPeeker: the reader has not run yet). Below d nothing
// is looked at.
func (mc *muxConn) blamed(d time.Duration) time.Duration {
	s := mc.silence()
	if s <= d {
		return s
	}
	if s -= max(mc.mx.stalls.Behind(), mc.mx.stalls.In(time.Now(), s)); s <= d {
		return s
	}
	if p, ok := mc.rw.(pool.ReplyPeeker); ok && p.ReplyWaiting() {
		return 0
	}
	return s
}

// silence is how long the master has kept its current connection's reader
// waiting (muxConn.silence); with no connection (it is being dialed or
// settled), the per-master timeout: no sign of the master answering.
// collect asks it before it counts a master that did not answer in time
// as failed (Silencer).
func (mx *mux) Silence() time.Duration {
	mx.mu.Lock()
	mc := mx.cur
	mx.mu.Unlock()
	if mc == nil || mc.isClosed() {
		return mx.timeout
	}
	return mc.blamed(mx.timeout)
}

// takeBacklog hands the commands of backlog to mc, in order. Those the
// queue has no room for are returned as busy; an undo command behind them
// still has the room kept for it (muxUndo). Once mc is closed the rest stay,
// in order, for its reader to put back behind what it carried.
func (mc *muxConn) takeBacklog(backlog []*muxReq) (rest, busy []*muxReq) {
	for i, r := range backlog {
		if mc.enqueue(r) == nil {
			continue
		}
		if mc.isClosed() {
			clear(backlog[:i])
			return backlog[i:], busy
		}
		busy = append(busy, r)
	}
	clear(backlog)
	return nil, busy
}

// enqueue hands r to the connection: written at once by the caller when
// the connection is idle, else queued for the writer goroutine, which
// writes everything queued in one pass. It fails at once when the
// connection is closed (with its cause) or too much is queued
// (errMuxBusy: muxQueue, or for an undo command muxQueue+muxUndo). (Writing in the caller
// whenever nobody else was writing was measured: it halved the 64-client
// throughput on five masters, since callers then pay a system call per
// master and batches shrink. Writing only on an idle connection — nothing
// awaiting a reply — keeps the batches under load and saves a lone caller
// the hand-off: one client's lock+unlock on N=5 went from ~0.26 to
// ~0.19 ms.)
func (mc *muxConn) enqueue(r *muxReq) error {
	if mc.writeIdle(r) {
		return nil
	}
	mc.qmu.Lock()
	defer mc.qmu.Unlock()
	if mc.isClosed() {
		return mc.err
	}
	if len(mc.queue) >= muxQueue && !r.undo {
		return errMuxBusy
	}
	select {
	case mc.queue <- r:
		mc.poke()
		return nil
	default:
		return errMuxBusy
	}
}

// writeIdle writes r in the caller when the connection is idle — nothing
// queued, nothing awaiting a reply, nobody writing — which saves a lone
// caller the hand-off to the writer goroutine; under load it declines and
// the writer batches. It reports whether it took r.
func (mc *muxConn) writeIdle(r *muxReq) bool {
	if len(mc.queue) > 0 || len(mc.pending) > 0 || !mc.wmu.TryLock() {
		return false
	}
	defer mc.wmu.Unlock()
	if len(mc.queue) > 0 || len(mc.pending) > 0 || mc.isClosed() {
		return false
	}
	if err := mc.nc.Send(r.cmd, r.args...); err != nil {
		mc.fail(err)
		mc.unsent = append(mc.unsent, r) // the reader settles it
		return true
	}
	r.sent = time.Now()
	mc.unanswered.Add(1)
	mc.pending <- r // never full: it was empty
	if err := mc.nc.Flush(); err != nil {
		mc.fail(err) // the reader settles r
	}
	return true
}

// submit sends a command without waiting: r.to gets the reply (or the
// failure) exactly once, without blocking the caller. Commands one
// goroutine submits reach the master in that order, also across a dial
// and a re-send; one marked drop fails unsent while the connection is down.
// r must not be touched again before its reply is delivered.
func (mx *mux) submit(r *muxReq) {
	for {
		mx.mu.Lock()
		mc := mx.cur
		if mc == nil {
			if err := mx.startDialLocked(); err != nil {
				mx.mu.Unlock()
				r.to.deliver(nil, err)
				return
			}
		}
		if mc == nil || mc.isClosed() {
			// Waits for the dial, behind what a failed connection re-sends.
			mx.backlog = append(mx.backlog, r)
			mx.mu.Unlock()
			return
		}
		mx.mu.Unlock()
		var err error
		if r.drop {
			err = mc.down()
		}
		if err == nil {
			err = mc.enqueue(r)
		}
		if err == nil {
			return
		}
		if !mc.isClosed() {
			r.to.deliver(nil, err)
			return
		}
		// It closed meanwhile: r joins the backlog.
	}
}

// Addr names the master (Transport).
func (mx *mux) Addr() string { return mx.addr }

// Ordered reports true: commands reach the master in the order they were
// submitted, also across a re-send after a broken connection, and a
// NOSCRIPT is answered by EVAL only where that keeps the order
// (noScript).
func (mx *mux) Ordered() bool { return true }

// Send submits cmd on the master's pipelined connection (Transport).
func (mx *mux) Send(cmd *transport.Command) {
	cq := cmdReqs.Get().(*cmdReq)
	cq.c = cmd
	q := &cq.muxReq
	q.fill(cmd, cq)
	if cmd.Wait != nil && mx.readOwn(cmd.Wait, cmd.Deadline, q) {
		return
	}
	mx.submit(q)
}

// readOwn writes q and reads its reply in the caller when the current
// connection is up and idle (muxConn.readOwn), and reports whether it
// took q; otherwise q is submitted as any other.
func (mx *mux) readOwn(ctx context.Context, deadline time.Time, q *muxReq) bool {
	mx.mu.Lock()
	mc := mx.cur
	mx.mu.Unlock()
	if mc == nil || mc.isClosed() || mc.silence() > 0 {
		return false
	}
	return mc.readOwn(ctx, deadline, q)
}

// Close ends a dial in progress, fails what its connections still carry
// with ErrClosed, closes them and waits for their goroutines (Transport).
func (mx *mux) Close() error {
	mx.mu.Lock()
	mx.closed = true
	if mx.endLife != nil {
		mx.endLife()
	}
	conns := make([]*muxConn, 0, len(mx.conns))
	for mc := range mx.conns {
		conns = append(conns, mc)
	}
	mx.mu.Unlock()
	for _, mc := range conns {
		mc.fail(transport.ErrClosed)
	}
	mx.wg.Wait()
	return nil
}

// RedactError removes the pool's credentials from err (pool.Redactor).
func (mx *mux) RedactError(err error) error {
	if mx.redact == nil {
		return err
	}
	return mx.redact(err)
}

// Subscribe opens the master's release-notice subscription on a
// connection of its own (Transport).
func (mx *mux) Subscribe(ctx context.Context, notify func(channel, payload string)) (transport.Subscription, error) {
	return subscribeRedigo(ctx, mx.dial, nil, notify)
}

// Inspect runs Client.Inspect's commands on a connection of the master's
// pool, not on the pipelined connection (Inspector).
func (mx *mux) Inspect(ctx context.Context, cmds []layout.Command) ([]any, error) {
	return inspectPool(ctx, mx.pool, cmds)
}
