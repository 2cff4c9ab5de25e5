package rueidis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lib "github.com/redis/rueidis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/adapter"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/transport"
)

// The lane: one master's lock commands over one rueidis client.
//
// rueidis pipelines by itself: commands that callers issue at the same
// time share a connection and a write. But each call (Do, DoMulti)
// blocks its caller until the reply, and calls from different goroutines
// reach the connection in whatever order they get there. The lane keeps
// the order Send was called in: one writer goroutine takes everything
// queued (up to laneBatch commands) and hands it to DoMulti as one
// pipeline, and takes the next batch only when DoMulti returned. For a
// client of one master every command then goes through the same
// auto-pipelined connection in order (rueidis puts a DoMulti's commands
// on one connection, and a command with no key slot on the first: see
// build), so they reach the master in the order Send was called, also
// when a batch was given up at its deadline with its commands still
// queued there. Under load batches grow
// by themselves; a lone caller pays one hand-off to the writer, and
// rueidis then writes and reads the batch on the writer's goroutine.
//
// No retry by rueidis re-sends a lock command: rueidis retries only
// commands tagged retryable (read-only ones, or ones made ToRetryable),
// and the lane builds every command with Arbitrary(...).Build(), which
// tags none; a DoMulti with any command not retryable is not retried as
// a whole either. So a ClientOption with DisableRetry false is safe. The
// one retry rueidis makes regardless, after ConnLifetime expired,
// concerns commands not yet written. The lane re-sends by itself, once,
// in order, ahead of anything queued, only what the master cannot have
// run twice: a command that allows it (Command.Resend) when the master
// closed the connection before answering it.
//
// Bounds. A command waiting in the queue is sent when the batch ahead
// returns, also past its deadline, unless it is past its end: lateBound
// past its deadline, or one grace (the Client's per-master timeout) when
// the master had been silent for longer than the command's wait when it
// was queued (see req.end); then it fails, unsent, unless it is not
// worthless late (not DropWhenDown: a rollback, a release) and a command
// ahead of it in its batch is sent: failed first, it would leave what
// that command does. A batch runs under a context that ends lateBound
// past the
// latest deadline in it; rueidis honours it (a DoMulti waiting on the
// shared connection returns at once; one rueidis writes and reads itself
// sets the connection's deadline to it and closes the connection when it
// passes). A master that does not answer therefore holds the lane that
// long at most, and a reply read late, past its command's deadline, is
// delivered: the Client decides how long it waits for a master, and a
// late answer is how it learns that the host is slow (its adaptive
// bound). Meanwhile commands marked DropWhenDown fail at Send, unsent,
// once the oldest command of the batch is past its deadline and the batch
// has waited for longer than lateBound of their own budget (see down),
// and Silence reports how long the batch has waited, less what of that
// this process was seen not to run: a beat (internal/stall) fires every
// laneBeat while a batch is in flight, and the stall its latest late
// firing told of, or how far overdue it is now, is left out, so that a
// master whose answer waited in the socket while this process did not
// run is not taken for silent for it.
//
// Scripts run by EVALSHA. The first time the lane sends a script, and
// after a batch failed on the connection (the master may have restarted
// and lost its scripts), a SCRIPT LOAD of it goes ahead of it in the same
// batch. A NOSCRIPT reply anyway (SCRIPT FLUSH) is answered by EVAL of
// the source, ahead of anything queued, where that keeps the order: when
// nothing was sent after the command in its batch, or when the command
// may run late (MayRunLate). Otherwise the NOSCRIPT error reply is
// delivered: the command did not run.

// laneQueue bounds the commands waiting for the writer: beyond it Send
// fails at once (errBusy) rather than queue behind a master that does not
// answer.
const laneQueue = 4096

// laneUndo is the room beyond laneQueue kept for commands that undo one
// already sent (a rollback, a fair waiter's leave).
const laneUndo = laneQueue + laneBatch

// laneBatch bounds the commands run in one pipeline (below rueidis's
// BlockingPipeline default, past which it would take a pooled connection
// of its own).
const laneBatch = 256

// laneBeat is the period of the beat that tells a lane's silence how
// long this process did not run while a batch was in flight.
const laneBeat = 5 * time.Millisecond

// defaultBound is a command's bound when it comes without a deadline.
const defaultBound = 5 * time.Second

// lateBound is how long past its deadline a command's batch may wait for
// it (adapter.LateBound).
var lateBound = adapter.LateBound

var (
	errBusy = errors.New("too many commands queued for this master")
	errDown = errors.New("master is not answering")
)

// req is one command in the lane.
type req struct {
	cmd      *transport.Command
	deadline time.Time
	budget   time.Duration
	// hung: when r was queued, the batch in flight had been silent for
	// longer than r's wait (its budget, at least its grace): see end.
	hung   bool
	sent   bool // a try was written
	resent bool
	eval   bool // send as EVAL (after NOSCRIPT)
}

// newReq returns cmd's request: its deadline, or defaultBound from now
// when it has none.
func newReq(cmd *transport.Command) *req {
	now := time.Now()
	deadline := cmd.Deadline
	if deadline.IsZero() {
		deadline = now.Add(defaultBound)
	}
	return &req{cmd: cmd, deadline: deadline, budget: deadline.Sub(now)}
}

// end is when r, not yet sent, fails, unsent, as the writer finds it:
// lateBound past its deadline — the master is slow, not down, while it
// answers its batches within the wait of the commands queued behind them,
// and r is sent, late, when the batch ahead returns, so that its answer
// reaches the Client — unless the master was taken for hung when r was
// queued (r.hung): then one grace past its deadline
// (transport.Command.Grace). The rule is the pooled redigo transport's:
// a command to a master silent for less than its wait is read up to
// lateBound past its deadline, one to a master silent for longer gets one
// per-master timeout.
func (r *req) end() time.Time {
	if r.hung {
		return r.deadline.Add(r.cmd.Grace)
	}
	return r.deadline.Add(lateBound(r.budget))
}

func (r *req) finish(v any, err error) {
	r.cmd.Complete(v, err, transport.SendInfo{Sent: r.sent, Resent: r.resent})
}

type lane struct {
	client lib.Client
	addr   string
	keyed  bool // give commands their keys (a cluster client routes by them)
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	q      []*req
	closed bool
	wake   chan struct{}
	exited chan struct{}

	flight atomic.Int64 // when the batch in flight was sent (UnixNano), 0 when none
	due    atomic.Int64 // the earliest deadline in the batch in flight (UnixNano)
	// stalls records the stalls of this process that beat, in while a
	// batch is in flight, saw (silence).
	stalls *stall.Stalls
	beat   *stall.Beat

	loaded map[*transport.Script]bool // the writer's: scripts loaded on the master
	direct sync.WaitGroup             // sendDirect's goroutines
}

func newLane(client lib.Client, addr string) *lane {
	l := &lane{
		client: client,
		addr:   addr,
		keyed:  client.Mode() == lib.ClientModeCluster,
		wake:   make(chan struct{}, 1),
		exited: make(chan struct{}),
		loaded: make(map[*transport.Script]bool),
		stalls: stall.New(clock.Real()),
	}
	l.beat = l.stalls.NewBeat(laneBeat)
	l.ctx, l.cancel = context.WithCancel(context.Background())
	go l.run()
	return l
}

// send queues cmd.
func (l *lane) send(cmd *transport.Command) {
	r := newReq(cmd)
	now := time.Now()
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		r.finish(nil, errClosed)
		return
	case cmd.DropWhenDown && l.down(now, r.deadline):
		l.mu.Unlock()
		r.finish(nil, errDown)
		return
	case len(l.q) >= laneUndo || len(l.q) >= laneQueue && !cmd.Undo:
		l.mu.Unlock()
		r.finish(nil, errBusy)
		return
	}
	r.hung = l.silence() >= max(cmd.Grace, r.budget)
	l.q = append(l.q, r)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// down reports whether a command due at deadline would wait behind a
// master that is down: the batch in flight is past its earliest deadline
// and has waited for longer than lateBound of the command's budget (at
// least a second: the most the Client's adaptive bound waits for a
// master, by default). A master silent for less is slow, not down: a
// host slow at every turn shows no stall its beat can see (silence), and
// on a loaded host, before the Client has learned
// how slow its masters are, a batch is past a 50 ms deadline at every
// turn: failing every acquisition at once, unsent, then taught the Client
// nothing and failed hundreds in a row. Queued instead, a command is
// sent when the batch returns, or fails at its deadline, unsent.
func (l *lane) down(now, deadline time.Time) bool {
	d, f := l.due.Load(), l.flight.Load()
	return d != 0 && f != 0 && now.UnixNano() > d && now.UnixNano()-f >= int64(lateBound(deadline.Sub(now)))
}

// silence is how long the batch in flight has waited for its replies,
// less what of that this process was seen not to run (the latest stall
// its beat told of, or how far overdue the beat is): 0 with none in
// flight.
func (l *lane) silence() time.Duration {
	f := l.flight.Load()
	if f == 0 {
		return 0
	}
	now := time.Now()
	s := now.Sub(time.Unix(0, f))
	return max(s-max(l.beat.Overdue(), l.stalls.In(now, s)), 0)
}

// run is the writer.
func (l *lane) run() {
	defer close(l.exited)
	for {
		select {
		case <-l.wake:
		case <-l.ctx.Done():
			return
		}
		for {
			l.mu.Lock()
			if len(l.q) == 0 || l.closed {
				l.mu.Unlock()
				break
			}
			n := min(len(l.q), laneBatch)
			batch := make([]*req, n)
			copy(batch, l.q)
			l.q = append(l.q[:0], l.q[n:]...)
			l.mu.Unlock()
			l.runBatch(batch)
		}
	}
}

// runBatch sends batch as one pipeline and completes its commands.
func (l *lane) runBatch(batch []*req) {
	now := time.Now()
	live := batch[:0]
	for _, r := range batch {
		// A command not worthless late (a rollback, a release) is
		// sent after a live command ahead of it in the batch, also
		// past its end: failed first, unsent, it would leave what
		// that command does (a SET's grant, an extension's).
		if now.After(r.end()) && (r.cmd.DropWhenDown || len(live) == 0) {
			r.finish(nil, timeoutError{})
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	cmds := make([]lib.Completed, 0, len(live)+1)
	idx := make([]int, 0, len(live)+1) // cmds[j] is live[idx[j]]'s, or a SCRIPT LOAD (-1)
	end, earliest := live[0].deadline, live[0].deadline
	for i, r := range live {
		if s := r.cmd.Script; s != nil && !r.eval && !l.loaded[s] {
			cmds = append(cmds, l.client.B().Arbitrary("SCRIPT", "LOAD").Args(s.Source()).Build())
			idx = append(idx, -1)
			l.loaded[s] = true
		}
		cmds = append(cmds, l.build(r))
		idx = append(idx, i)
		end = later(end, r.deadline.Add(lateBound(r.budget)))
		if r.deadline.Before(earliest) {
			earliest = r.deadline
		}
	}
	ctx, cancel := context.WithDeadline(l.ctx, end)
	l.due.Store(earliest.UnixNano())
	l.flight.Store(now.UnixNano())
	l.beat.Enter()
	res := l.client.DoMulti(ctx, cmds...)
	l.beat.Leave()
	l.flight.Store(0)
	l.due.Store(0)
	cancel()

	var again []*req
	broke := false
	for j, rr := range res {
		i := idx[j]
		if i < 0 {
			broke = broke || rr.NonRedisError() != nil
			continue
		}
		r := live[i]
		retry, b := l.settle(r, rr, i == len(live)-1)
		broke = broke || b
		if retry {
			if r.eval {
				l.loaded[r.cmd.Script] = false
			}
			again = append(again, r)
		}
	}
	if broke {
		clear(l.loaded)
	}
	if len(again) > 0 {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			for _, r := range again {
				r.finish(nil, errClosed)
			}
			return
		}
		l.q = append(again, l.q...)
		l.mu.Unlock()
	}
}

// settle completes r with its try's result rr, or reports that r is to
// be sent again (retry): as EVAL after a NOSCRIPT, when nothing was sent
// after it (last) or it may run late; once more when the master closed
// the connection before answering and r allows it. broke reports a
// failure of the connection (the master may have lost its scripts).
func (l *lane) settle(r *req, rr lib.RedisResult, last bool) (retry, broke bool) {
	msg, err := rr.ToMessage()
	if err == nil || lib.IsRedisNil(err) {
		r.sent = true
		v, verr := value(r.cmd.Reply, &msg, err != nil)
		r.finish(v, verr)
		return false, false
	}
	if re, ok := lib.IsRedisErr(err); ok {
		r.sent = true
		if re.IsNoScript() && r.cmd.Script != nil && !r.eval && (last || r.cmd.MayRunLate) {
			r.eval = true
			return true, false
		}
		r.finish(nil, replyError(&msg, re))
		return false, false
	}
	switch {
	case l.ctx.Err() != nil:
		r.sent = true
		r.finish(nil, errClosed)
	case errors.Is(err, context.DeadlineExceeded):
		r.sent = true
		r.finish(nil, timeoutError{})
	case closedByMaster(err) && r.cmd.Resend && !r.resent:
		r.sent, r.resent = true, true
		return true, true
	default:
		r.sent = r.sent || !dialFailed(err)
		r.finish(nil, err)
	}
	return false, true
}

// sendDirect is the transport without a lane, kept to measure what the
// lane is worth (bench_test.go): each command is sent by a goroutine of
// its own with Do, relying on rueidis's auto-pipelining alone. Commands
// then reach the master in no particular order (the transport is not
// Ordered), and scripts are not loaded ahead (a first NOSCRIPT is
// answered by EVAL).
func (l *lane) sendDirect(cmd *transport.Command) {
	r := newReq(cmd)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		r.finish(nil, errClosed)
		return
	}
	l.direct.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.direct.Done()
		for {
			ctx, cancel := context.WithDeadline(l.ctx, r.deadline.Add(lateBound(r.budget)))
			rr := l.client.Do(ctx, l.build(r))
			cancel()
			if retry, _ := l.settle(r, rr, true); !retry {
				return
			}
		}
	}()
}

// build returns r's command for rueidis: a script as EVALSHA (EVAL after
// a NOSCRIPT). Its keys are given as keys (Keys) to a cluster client
// only, which routes by them: a client of one master puts a command with
// a key slot on one of its pipelined connections at random
// (PipelineMultiplex), and batches on two connections could overtake one
// another once one was given up at its deadline; a command without one
// always goes on the first.
func (l *lane) build(r *req) lib.Completed {
	args := r.cmd.Args
	nk := min(max(r.cmd.NumKeys, 0), len(args))
	var head []string
	switch s := r.cmd.Script; {
	case s != nil && r.eval:
		head = []string{"EVAL", s.Source(), strconv.Itoa(nk)}
	case s != nil:
		head = []string{"EVALSHA", s.SHA(), strconv.Itoa(nk)}
	default:
		head = []string{r.cmd.Name}
		if nk == 0 && len(args) > 0 && strings.EqualFold(r.cmd.Name, "SET") {
			nk = 1
		}
	}
	if !l.keyed {
		return l.client.B().Arbitrary(head...).Args(strs(args)...).Build()
	}
	return l.client.B().Arbitrary(head...).Keys(strs(args[:nk])...).Args(strs(args[nk:])...).Build()
}

// strs returns the arguments as strings.
func strs(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch a := a.(type) {
		case string:
			out[i] = a
		case []byte:
			out[i] = string(a)
		case int64:
			out[i] = strconv.FormatInt(a, 10)
		case int:
			out[i] = strconv.Itoa(a)
		default: // not one the contract names (string, []byte, int64)
			out[i] = fmt.Sprint(a)
		}
	}
	return out
}

// dialFailed reports whether err is a failure to connect: nothing was
// written.
func dialFailed(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// close fails what is queued, ends the batch in flight and waits for the
// writer.
func (l *lane) close() {
	l.mu.Lock()
	l.closed = true
	q := l.q
	l.q = nil
	l.mu.Unlock()
	l.cancel()
	<-l.exited
	l.beat.Stop()
	l.direct.Wait()
	for _, r := range q {
		r.finish(nil, errClosed)
	}
}
