package goredis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/adapter"
	"github.com/quorumlock/quorumlock/redlock"
)

// The lane: one master's lock commands over one redis.UniversalClient.
//
// go-redis offers no way to keep a connection's writes and reads apart, so
// the lane pipelines in rounds: one writer goroutine takes everything
// queued (up to laneBatch commands), runs it as one go-redis pipeline
// (Pipelined: one write, one read of every reply, through the client's
// hooks) and only then takes the next batch. A batch therefore reaches the
// master after the previous one was answered or failed, whatever
// connection of the client's pool it runs on, and within a batch the
// commands run in the order they were queued: commands reach the master
// in the order Send was called. Under load, batches grow by themselves;
// a lone caller pays one hand-off to the writer.
//
// go-redis retries a failed pipeline as a whole (MaxRetries, 3 by default),
// which would run a batch's commands twice when the first try was only
// half read. Every command of the lane is therefore marked NoRetry (see
// laneCmd), so go-redis never re-sends one; the lane re-sends by itself,
// once, in order, and only what the master cannot have run twice: a
// command whose request allows it (resend), when the master closed the
// connection before answering.
//
// Each command is bounded past its deadline, as the pooled redigo
// transport bounds its read: a watchdog timer settles every command
// queued (never sent) that reaches its end (endLocked), lateBound past its
// deadline when its master had kept the batch ahead waiting for less than
// the command's wait when it was queued (a slow master: the command is
// sent when that batch returns, late, and its answer is delivered), one
// grace (the Client's per-master timeout) past it when the master had
// been silent for longer (a master taken for hung). A command not
// worthless late (not dropWhenDown: a rollback, a release) is not failed
// before a command kept ahead of it in the queue: it is sent after it. A
// command in flight
// (sent, unanswered) that is due makes the master down until its batch
// returns:
// commands marked dropWhenDown then fail at once, unsent, unless the
// batch has been silent for less than their own budget (a master the
// Client's adaptive bound waits longer for is slow, not down). The
// command itself stays in flight until its limit (lateBound past its
// deadline), so that a reply read late is still delivered: the Client
// decides how long it waits for a master (collect, with Silence), and a
// late answer is how it learns that the host is slow (its adaptive
// bound), as a reply read late by the pipelined redigo transport is. A
// command in flight is due when its batch has waited as long as the
// command had from its queueing to its deadline (its budget): the master
// has then been silent for it, whether or not the command waited in the
// queue first, behind a batch that the master answered late (dueLocked).
// Both allow for this process's stalls: while commands wait, the watchdog beats
// (every laneBeat), and a firing that was late — this process did not
// run, nor did the goroutines that read go-redis's replies, which may
// wait in the socket — is a stall that every command waiting then went
// through. A command is due as much later as the longest stall it went
// through (not their sum: a process always a few milliseconds late would
// excuse a hung master for several times its timeout), and never past
// its limit: a master that does not answer is still found out, however
// long this process stalls.
// The batch itself runs under a context that ends when the watchdog has
// settled every command of it, at the latest at the latest limit of its
// commands; go-redis honours it on reads and writes only
// with Options.ContextTimeoutEnabled, else its ReadTimeout and
// WriteTimeout bound the batch. A context that ended at the commands' own
// deadlines would make go-redis refuse, unsent, a batch whose commands a
// stall had made due later.
//
// Scripts run by EVALSHA. The first time the lane sends a script, and
// after a batch failed on the connection (the master may have restarted
// and lost its scripts), a SCRIPT LOAD of it goes ahead of it in the same
// batch. A NOSCRIPT reply anyway (SCRIPT FLUSH) is answered by EVAL of
// the source, ahead of anything queued, where that keeps the order: when
// nothing was sent after the command in its batch, or when the command may
// run late (mayRunLate). Otherwise the NOSCRIPT error reply is delivered:
// the command did not run.

// laneQueue bounds the commands waiting for the writer: beyond it Send
// fails at once (errBusy) rather than queue behind a master that does not
// answer.
const laneQueue = 4096

// laneUndo is the room beyond laneQueue kept for commands that undo one
// already sent (a rollback, a fair waiter's leave): refused, they would
// leave the key until its TTL.
const laneUndo = laneQueue + laneBatch

// laneBatch bounds the commands run in one pipeline.
const laneBatch = 256

// laneBeat is how often the watchdog fires while commands wait: how
// finely a stall of this process is measured (one that begins less than
// laneBeat before a firing is seen from when that firing was due).
const laneBeat = 5 * time.Millisecond

// lateBound is the most a command may be due past its deadline (stalls of
// this process, a batch sent late): adapter.LateBound.
var lateBound = adapter.LateBound

// errBusy is returned for a command refused because too many wait.
var errBusy = errors.New("too many commands queued for this master")

// errClosed is returned for commands sent to, or pending on, a closed
// transport.
var errClosed = fmt.Errorf("goredis: transport closed: %w", redlock.ErrClosed)

// errDown is returned, unsent, for a dropWhenDown command while the master
// leaves a command unanswered past its deadline.
var errDown = errors.New("master is not answering")

// timeoutError is a command's deadline passing before its reply.
type timeoutError = adapter.TimeoutError

var errTimeout error = timeoutError{}

// script is a Lua script as the lane sends it.
type script struct {
	sha, src string
}

// req is one command in a lane. The caller fills in the fields above the
// line; the lane owns the rest.
type req struct {
	script *script // run by EVALSHA; nil: name is the command
	name   string
	// args follow the command name; for a script, nkeys keys then its
	// arguments (the lane inserts the SHA1 and nkeys).
	args     []any
	nkeys    int
	deadline time.Time
	// grace: how long past its deadline r is waited for when its master
	// was taken for hung at its queueing (transport.Command.Grace).
	grace time.Duration
	// resend: when the master closes the connection before answering, the
	// lane sends the command once more (resent says so in done).
	resend bool
	// mayRunLate: the command may run after commands queued after it
	// (decides the EVAL fallback after a NOSCRIPT in a busy batch).
	mayRunLate bool
	// undo: the command undoes one sent before it; it may use laneUndo.
	undo bool
	// dropWhenDown: fail it at once, unsent, while the master is down.
	dropWhenDown bool
	// done receives the reply or the error, exactly once, from any
	// goroutine; it must not block. sent reports whether the command may
	// have reached the master; resent, whether it was sent twice.
	done func(reply any, err error, sent, resent bool)

	// -----
	settled atomic.Bool
	at      time.Time // when r was queued
	limit   time.Time // the latest r is waited for, sent or not (lateBound past its deadline)
	// hung: when r was queued, the master had kept the batch in flight
	// waiting for longer than r's wait (its budget, at least its grace):
	// r is failed one grace past its deadline if still queued (endLocked).
	hung bool
	// stall is the longest stall of this process seen since r was queued,
	// sentStall since its batch was handed to go-redis at sentAt
	// (dueLocked; under the lane's mu).
	stall     time.Duration
	sentAt    time.Time
	sentStall time.Duration
	sent      bool // handed to go-redis (under the lane's mu)
	resent    bool // (under the lane's mu)
	eval      bool // send as EVAL (after a NOSCRIPT)
}

// settle calls r.done unless it was called already.
func (r *req) settle(v any, err error, sent bool) {
	if r.settled.CompareAndSwap(false, true) {
		r.done(v, err, sent, r.resent)
	}
}

// lane carries one master's commands; see the top of this file.
type lane struct {
	client redis.UniversalClient
	addr   string

	mu       sync.Mutex
	queue    []*req // waiting for the writer, in order
	inflight []*req // the batch being run
	down     bool   // a command in flight was due, unanswered
	closed   bool
	timer    *time.Timer
	timerAt  time.Time // when timer fires; zero when it is stopped
	// nextDue is when the earliest command waiting may be due
	// (dueLocked, as of the stalls seen so far: more stalls, and sending
	// it, only make it due later). Zero when no command waits.
	nextDue time.Time
	// batchAt is when the batch in flight was handed to go-redis
	// (silence).
	batchAt time.Time
	// lastStall is the latest stall the watchdog saw, ending at
	// lastStallEnd (silence).
	lastStall    time.Duration
	lastStallEnd time.Time
	cancel       context.CancelFunc

	wake   chan struct{} // size 1: the queue has work
	stop   chan struct{} // closed by close
	exited chan struct{} // closed when the writer returns

	loaded map[*script]bool // scripts the master is known to hold (the writer's)
	// sharded: the client spreads commands over many nodes by key (a
	// cluster, a ring; see sharded in cluster.go): a SCRIPT LOAD would
	// reach one node only, so none is sent, and every NOSCRIPT is answered
	// by EVAL on the node that gave it.
	sharded bool
}

func newLane(client redis.UniversalClient, addr string) *lane {
	l := &lane{
		client:  client,
		addr:    addr,
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		exited:  make(chan struct{}),
		loaded:  make(map[*script]bool),
		sharded: sharded(client),
	}
	l.timer = time.AfterFunc(time.Hour, l.expire)
	l.timer.Stop()
	go l.writer()
	return l
}

// send queues r; it never blocks on the network.
func (l *lane) send(r *req) {
	now := time.Now()
	l.mu.Lock()
	var err error
	switch {
	case l.closed:
		err = errClosed
	case l.down && r.dropWhenDown && l.silenceLocked(now) >= r.deadline.Sub(now):
		// The master has kept its batch waiting for longer than r's
		// whole budget: r would wait behind it past its deadline. One
		// silent for less is slow, not down: under the Client's
		// adaptive bound a later command may have more time than the
		// one that found the master late.
		err = errDown
	case !now.Before(r.deadline):
		err = errTimeout
	case len(l.queue) >= laneQueue && (!r.undo || len(l.queue) >= laneQueue+laneUndo):
		err = errBusy
	}
	if err != nil {
		l.mu.Unlock()
		r.settle(nil, err, false)
		return
	}
	r.at = time.Now()
	budget := r.deadline.Sub(r.at)
	r.limit = r.deadline.Add(lateBound(budget))
	r.hung = l.silenceLocked(r.at) >= max(r.grace, budget)
	l.queue = append(l.queue, r)
	l.armLocked(r.deadline, time.Now())
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// armLocked notes that a command may be due at at, and makes the watchdog
// fire by then, and within laneBeat of now.
func (l *lane) armLocked(at, now time.Time) {
	if l.nextDue.IsZero() || at.Before(l.nextDue) {
		l.nextDue = at
	}
	at = l.nextDue
	if beat := now.Add(laneBeat); beat.Before(at) {
		at = beat
	}
	if !l.timerAt.IsZero() && !at.Before(l.timerAt) {
		return
	}
	l.timerAt = at
	l.timer.Reset(at.Sub(now))
}

// dueLocked is when r is due, at the latest r.limit: its deadline pushed
// back by the longest stall this process went through since r was queued
// (r.stall); once sent, when its batch has kept it waiting as long as r
// had from its queueing to its deadline (its budget), pushed back by the
// longest stall since it was sent — the master has then been silent for
// the budget. The longest stall, not their sum: with a stall of 4 ms in
// every 5 ms the sum kept a hung master's command five times its budget
// (TestLane_shortStallsDoNotAddUp). A command queued behind a batch that
// a slow master answered late, and sent only then, is not failed at its
// deadline while the master answers its own batch in time: the Client
// waits on as long as the master is not silent (transport.Silencer), and a
// reply read late leaves only less validity, counted from before the
// round's first write (a grant read after the Client gave up is rolled
// back). Only a command sent is judged by when it is due; one still
// queued waits until its end (endLocked).
func (l *lane) dueLocked(r *req) time.Time {
	budget := r.deadline.Sub(r.at)
	due := r.deadline.Add(r.stall)
	if r.sent && !r.sentAt.IsZero() {
		if d := r.sentAt.Add(budget + r.sentStall); d.After(due) {
			due = d
		}
	}
	if due.Before(r.limit) {
		return due
	}
	return r.limit
}

// endLocked is when r, not yet sent, is failed, unsent: at its limit —
// the master is slow, not down, while it answers its batches within the
// wait of the commands queued behind them, and r is sent, late, when the
// batch ahead returns, so that its answer reaches the Client — unless the
// master was taken for hung when r was queued (r.hung): then one grace
// past r's deadline, pushed back by the longest stall r went through,
// never past its limit. The rule is the pooled redigo transport's
// (readBy): a command to a master silent for less than its wait is read
// up to lateBound past its deadline, one to a master silent for longer
// gets one per-master timeout.
func (l *lane) endLocked(r *req) time.Time {
	if !r.hung {
		return r.limit
	}
	if end := r.deadline.Add(r.grace + r.stall); end.Before(r.limit) {
		return end
	}
	return r.limit
}

// stallLocked records a stall of this process: the watchdog fired late by
// late at now. Every command waiting then went through it, which makes it
// due later when it is the longest it went through (dueLocked); silence
// takes it off the batch's. All of it, even for a command queued after
// the process ran again and before the watchdog did: only the part since
// its queueing made the stopped-client test fail more (a process that has
// just run again runs its readers late too).
func (l *lane) stallLocked(late time.Duration, now time.Time) {
	l.lastStallEnd, l.lastStall = now, late
	for _, r := range l.queue {
		r.stall = max(r.stall, late)
	}
	for _, r := range l.inflight {
		r.stall = max(r.stall, late)
		if !r.sentAt.IsZero() {
			r.sentStall = max(r.sentStall, late)
		}
	}
}

// expire is the watchdog: it settles every command that is due and arms
// itself for the next one, or for its next beat. A firing over a
// millisecond late means this process did not run for that long: a stall
// of every command waiting (stallLocked, see the top of this file).
func (l *lane) expire() {
	now := time.Now()
	var expired []settlement
	l.mu.Lock()
	if l.closed || l.timerAt.IsZero() {
		l.mu.Unlock()
		return
	}
	if late := now.Sub(l.timerAt); late > time.Millisecond {
		l.stallLocked(late, now)
	}
	l.timerAt = time.Time{}
	if l.nextDue.IsZero() {
		l.mu.Unlock()
		return
	}
	if now.Before(l.nextDue) {
		if len(l.queue) == 0 && len(l.inflight) == 0 {
			// Every command was answered: nothing waits, so no beat
			// (nextDue stayed at the earliest deadline, and the lane
			// beat every laneBeat until it passed: 500 idle lanes
			// whose commands had 5 s deadlines took 17% of a CPU).
			l.nextDue = time.Time{}
			l.mu.Unlock()
			return
		}
		l.armLocked(l.nextDue, now) // a beat
		l.mu.Unlock()
		return
	}
	l.nextDue = time.Time{}
	var next time.Time
	var ahead time.Time // the latest end of the commands kept ahead of r
	keep := l.queue[:0]
	for _, r := range l.queue {
		end := l.endLocked(r)
		if !r.dropWhenDown && ahead.After(end) {
			// r is not worthless late (a rollback, a release) and a
			// command ahead of it is kept: failed first, unsent, r
			// would leave what that command does when it is sent (a
			// SET's grant, an extension's).
			end = ahead
		}
		switch {
		case r.settled.Load():
		case !now.Before(end):
			expired = append(expired, settlement{r, r.sent})
		default:
			keep = append(keep, r)
			if end.After(ahead) {
				ahead = end
			}
			if next.IsZero() || end.Before(next) {
				next = end
			}
		}
	}
	clear(l.queue[len(keep):])
	l.queue = keep
	waiting := false
	for _, r := range l.inflight {
		due := l.dueLocked(r)
		switch {
		case r.settled.Load():
			// run marks every unsettled command of the batch sent when it
			// takes the batch, under l.mu: one not sent here is settled.
		case !now.Before(r.limit):
			expired = append(expired, settlement{r, true})
			l.down = true
		case !now.Before(due):
			// Sent and due: the master has been silent for the
			// command's budget, so it is down for commands worthless
			// late; the command itself waits on for its reply, until
			// its limit, so that a reply read late still reaches the
			// Client (a slow master's answer, see the top of this
			// file).
			l.down = true
			waiting = true
			if next.IsZero() || r.limit.Before(next) {
				next = r.limit
			}
		default:
			waiting = true
			if next.IsZero() || due.Before(next) {
				next = due
			}
		}
	}
	if !waiting && len(l.inflight) > 0 && l.cancel != nil {
		// Nothing of the batch is waited for any more: end it. (go-redis
		// sets a socket's deadlines from the context's deadline only: a
		// read that waits on a master that does not answer is not ended
		// by the cancel, but waits for that deadline, the latest
		// command's limit, or for the client's ReadTimeout.)
		l.cancel()
	}
	if !next.IsZero() {
		l.armLocked(next, now)
	}
	l.mu.Unlock()
	for _, e := range expired {
		e.r.settle(nil, errTimeout, e.sent)
	}
}

// silence is how long the master has kept the batch in flight waiting
// (transport.Silencer): the time since it was handed to go-redis, less what
// of it this process was seen not to run — the latest stall the watchdog
// saw (the part of it since the batch was sent), or how far the
// watchdog's next firing is overdue now (a stall it has not yet seen:
// this process has just run again), whichever is more. 0 when no batch is
// in flight. Only the latest stall, not their sum: a process that is
// always a few milliseconds late (a busy machine) would otherwise excuse
// a hung master for most of its silence (its silence grew at a fifth of
// the wall clock's pace with two spinning goroutines). go-redis
// reads a batch's replies before it returns, so a reply to a command early
// in a batch does not end the silence; a master that answers whole
// batches in time is not silent, and a hung one is, from its batch's send.
func (l *lane) silence() time.Duration {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.silenceLocked(now)
}

// silenceLocked is silence as of now (under mu).
func (l *lane) silenceLocked(now time.Time) time.Duration {
	if l.batchAt.IsZero() {
		return 0
	}
	s := now.Sub(l.batchAt)
	var off time.Duration
	if !l.lastStallEnd.IsZero() {
		start := l.lastStallEnd.Add(-l.lastStall)
		if start.Before(l.batchAt) {
			start = l.batchAt
		}
		if l.lastStallEnd.After(start) {
			off = l.lastStallEnd.Sub(start)
		}
	}
	if !l.timerAt.IsZero() {
		if late := now.Sub(l.timerAt); late > time.Millisecond {
			off = max(off, late)
		}
	}
	return max(s-off, 0)
}

// settlement is a request to settle and whether it may have been sent,
// read under the lane's mu.
type settlement struct {
	r    *req
	sent bool
}

// close fails everything queued or in flight and waits for the writer,
// which returns once its batch does.
func (l *lane) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.exited
		return
	}
	l.closed = true
	pending := make([]settlement, 0, len(l.inflight)+len(l.queue))
	for _, r := range l.inflight {
		pending = append(pending, settlement{r, r.sent})
	}
	for _, r := range l.queue {
		pending = append(pending, settlement{r, r.sent})
	}
	l.queue = nil
	l.timer.Stop()
	l.timerAt, l.nextDue = time.Time{}, time.Time{}
	if l.cancel != nil {
		l.cancel()
	}
	l.mu.Unlock()
	close(l.stop)
	for _, e := range pending {
		e.r.settle(nil, errClosed, e.sent)
	}
	<-l.exited
}

func (l *lane) writer() {
	defer close(l.exited)
	var batch []*req
	for {
		select {
		case <-l.wake:
		case <-l.stop:
			return
		}
		for {
			var ok bool
			if batch, ok = l.run(batch[:0]); !ok {
				break
			}
		}
	}
}

// laneCmd is a go-redis command that go-redis must never retry: the lane
// decides what is sent again (see the top of this file).
type laneCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to retry a pipeline holding the command.
func (laneCmd) NoRetry() bool { return true }

// run takes a batch from the queue (appended to batch, a buffer), sends
// it and settles its commands. It reports false when there was nothing
// to take.
func (l *lane) run(batch []*req) ([]*req, bool) {
	l.mu.Lock()
	if l.closed || len(l.queue) == 0 {
		l.mu.Unlock()
		return batch, false
	}
	n := min(len(l.queue), laneBatch)
	batch = append(batch, l.queue[:n]...)
	rest := copy(l.queue, l.queue[n:])
	clear(l.queue[rest:])
	l.queue = l.queue[:rest]
	l.inflight = batch
	l.batchAt = time.Now()

	cmds := make([]laneCmd, 0, len(batch)+2)
	of := make([]*req, 0, len(batch)+2) // the request of cmds[i]; nil for a SCRIPT LOAD
	var loading map[*script]bool
	var last time.Time
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	for _, r := range batch {
		if r.settled.Load() {
			continue
		}
		if r.limit.After(last) {
			last = r.limit
		}
	}
	if !last.IsZero() {
		ctx, cancel = context.WithDeadline(context.Background(), last)
	}
	l.cancel = cancel
	for _, r := range batch {
		if r.settled.Load() {
			continue
		}
		r.sent = true
		r.sentAt, r.sentStall = l.batchAt, 0
		if s := r.script; s != nil && !r.eval && !l.sharded && !l.loaded[s] && !loading[s] {
			if loading == nil {
				loading = make(map[*script]bool)
			}
			loading[s] = true
			cmds = append(cmds, laneCmd{redis.NewCmd(ctx, "SCRIPT", "LOAD", s.src)})
			of = append(of, nil)
		}
		cmds = append(cmds, laneCmd{redis.NewCmd(ctx, r.command()...)})
		of = append(of, r)
	}
	l.mu.Unlock()
	defer cancel()
	defer clear(batch)
	if len(cmds) == 0 {
		l.finish(nil)
		return batch, true
	}

	_, _ = l.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range cmds {
			_ = p.Process(ctx, c)
		}
		return nil
	})

	var again []*req // sent again, ahead of the queue, in order
	broken := false
	for i, c := range cmds {
		r := of[i]
		v, err := c.Val(), c.Err()
		var rerr redis.Error
		switch {
		case err == nil || errors.Is(err, redis.Nil) || errors.As(err, &rerr):
			if errors.Is(err, redis.Nil) {
				v, err = nil, nil
			}
			if r == nil { // SCRIPT LOAD
				s := of[i+1].script
				if err == nil && v == s.sha {
					l.loaded[s] = true
				}
				continue
			}
			if rerr != nil && r.script != nil && isNoScript(err) {
				l.loaded[r.script] = false
				if r.mayRunLate || l.sharded || lastSent(of[i+1:]) {
					r.eval = true
					again = append(again, r)
					continue
				}
			}
			if err != nil {
				r.settle(nil, err, true)
				continue
			}
			nv, nerr := normalize(v)
			if nerr != nil {
				r.settle(nil, &desyncError{err: nerr}, true)
				continue
			}
			r.settle(nv, nil, true)
		default:
			broken = true
			if r == nil {
				continue
			}
			if unsent(err) {
				r.settle(nil, err, false)
				continue
			}
			if r.resend && !r.resent && closedByMaster(err) && !r.settled.Load() {
				again = append(again, r)
				continue
			}
			if timedOut(err) {
				// The batch's context or go-redis's read deadline
				// ended it, at the latest limit in it, as the watchdog
				// settles it: no reply before the command's deadline.
				err = errTimeout
			}
			r.settle(nil, err, true)
		}
	}
	if broken {
		clear(l.loaded)
	}
	l.finish(again)
	return batch, true
}

// finish ends a batch: again goes ahead of the queue.
func (l *lane) finish(again []*req) {
	l.mu.Lock()
	l.inflight = nil
	l.batchAt = time.Time{}
	l.down = false
	l.cancel = nil
	if l.closed {
		l.mu.Unlock()
		for _, r := range again {
			r.settle(nil, errClosed, true)
		}
		return
	}
	if len(again) > 0 {
		for _, r := range again {
			if r.eval {
				r.sent = false // NOSCRIPT: it did not run
			} else {
				r.resent = true
			}
		}
		l.queue = append(again, l.queue...)
	}
	l.mu.Unlock()
}

// lastSent reports whether nothing after a command was sent in its batch
// (rest: the requests after it, nil for SCRIPT LOADs).
func lastSent(rest []*req) bool {
	for _, r := range rest {
		if r != nil {
			return false
		}
	}
	return true
}

// command returns the go-redis arguments of r.
func (r *req) command() []any {
	if r.script == nil {
		return append([]any{r.name}, r.args...)
	}
	a := make([]any, 0, 3+len(r.args))
	if r.eval {
		a = append(a, "EVAL", r.script.src)
	} else {
		a = append(a, "EVALSHA", r.script.sha)
	}
	a = append(a, r.nkeys)
	return append(a, r.args...)
}

// isNoScript reports whether err is the NOSCRIPT error reply.
func isNoScript(err error) bool {
	return strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// unsent reports whether err means the batch never reached a connection:
// no connection could be dialed or had from the pool.
func unsent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrClosed)
}

// timedOut reports whether err is a batch's context ending or a read
// deadline passing.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// closedByMaster reports whether err means the master closed the
// connection: it then runs nothing more of what it had not read.
func closedByMaster(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
