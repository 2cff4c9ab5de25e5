package redlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

// Pipelining (WithPipelining, on by default).
//
// A mux carries the commands of every goroutine of a client bound for one
// master over one connection: a writer goroutine takes what is queued and
// writes it in one pass (one flush), and a reader goroutine reads the
// replies, which come in the same order, and hands each to its caller.
// Concurrent lock operations thus cost the master and the client one write
// and one read per batch, not per command. Each caller still waits only
// until its own deadline; a reply that comes later is dropped. A master
// that stops answering breaks the connection after stallTimeout, failing
// what is pending, and the next command dials a new one. The scripts are
// loaded on every new connection before it carries EVALSHA.

// muxQueue bounds the commands waiting for the writer: beyond it callers
// fail at once rather than queue behind a master that does not read.
const muxQueue = 4096

// muxBatch bounds the commands written in one pass.
const muxBatch = 256

var errMuxBusy = errors.New("too many commands queued for this master")

type mux struct {
	c *Client
	m *master

	mu      sync.Mutex
	cur     *muxConn
	dialing chan struct{} // while a dialer runs; closed when it ends
	backlog []*muxReq     // submitted while no connection was live, in order
	dialErr error         // the last dial's failure
	failAt  time.Time     // when it failed
}

// redialDelay spaces dials to a master whose last dial failed: meanwhile
// commands to it fail at once. (A stopped master accepts connections
// without ever answering; dialing it on every command would fill its
// accept queue.)
func (mx *mux) redialDelay() time.Duration {
	d := 10 * mx.c.timeout
	if d > time.Second {
		d = time.Second
	}
	return d
}

type muxReq struct {
	cmd  string
	args []any
	// to receives the reply, exactly once, on the reader's goroutine (or
	// whichever fails the request); it must not block. A round's requests
	// are part of the round, and to is the round's own per-master state, so
	// that sending a command allocates nothing.
	to replier
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
	queue   chan *muxReq  // waiting for the writer
	kick    chan struct{} // size 1: the queue has work
	pending chan *muxReq  // written, awaiting replies in order
	closed  chan struct{}
	once    sync.Once
	err     error

	batch []*muxReq // the writer's

	// wmu serializes writing with handing the written requests to the
	// reader, so replies and requests pair up in order.
	wmu sync.Mutex
}

// dialer is what a pool needs for pipelining: connections of its own.
type dialer interface {
	Dial(ctx context.Context) (redis.Conn, error)
}

// conn returns a live pipelined connection, waiting (until ctx ends) for
// the dial that a missing one sets off.
func (mx *mux) conn(ctx context.Context) (*muxConn, error) {
	for first := true; ; first = false {
		mx.mu.Lock()
		if mc := mx.cur; mc != nil && !mc.isClosed() {
			mx.mu.Unlock()
			return mc, nil
		}
		if !first {
			err := mx.dialErr
			mx.mu.Unlock()
			return nil, err
		}
		wait, err := mx.startDialLocked()
		mx.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// startDialLocked starts the dialer unless one runs, and returns the
// channel that closes when it ends.
func (mx *mux) startDialLocked() (chan struct{}, error) {
	if mx.dialing != nil {
		return mx.dialing, nil
	}
	if mx.dialErr != nil && time.Since(mx.failAt) < mx.redialDelay() {
		return nil, mx.dialErr
	}
	c := mx.c
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	c.workers.Add(1)
	c.mu.Unlock()
	ch := make(chan struct{})
	mx.dialing = ch
	go mx.dialer(ch)
	return ch, nil
}

// dialer makes a new connection, bounded by the per-master timeout, and
// hands it the backlog, in order, before anything else can reach it.
func (mx *mux) dialer(ch chan struct{}) {
	defer mx.c.workers.Done()
	ctx, cancel := context.WithTimeout(context.Background(), mx.c.timeout)
	mc, err := mx.dial(ctx)
	cancel()
	mx.mu.Lock()
	backlog := mx.backlog
	mx.backlog = nil
	var failed []*muxReq
	if err == nil {
		for _, r := range backlog {
			if e := mc.enqueue(r); e != nil {
				failed = append(failed, r)
			}
		}
		mx.cur = mc
	} else {
		failed = backlog
	}
	mx.dialErr = err
	if err != nil {
		mx.failAt = time.Now()
	}
	mx.dialing = nil
	mx.mu.Unlock()
	close(ch)
	if err == nil {
		err = errMuxBusy
	}
	for _, r := range failed {
		r.to.deliver(nil, err)
	}
}

func (mx *mux) dial(ctx context.Context) (*muxConn, error) {
	nc, err := mx.m.pool.(dialer).Dial(ctx)
	if err != nil {
		return nil, err
	}
	// Load the scripts first: a NOSCRIPT in the middle of a pipeline would
	// cost the caller a second round trip.
	all := scripts.All
	timeout := mx.c.timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	for _, s := range all {
		if err = nc.Send("SCRIPT", "LOAD", s.Source()); err != nil {
			break
		}
	}
	if err == nil {
		err = nc.Flush()
	}
	for range all {
		if err != nil {
			break
		}
		_, err = redis.ReceiveWithTimeout(nc, timeout)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	mc := &muxConn{mx: mx, nc: nc, queue: make(chan *muxReq, muxQueue), kick: make(chan struct{}, 1),
		pending: make(chan *muxReq, muxQueue+muxBatch), closed: make(chan struct{}),
		batch: make([]*muxReq, 0, muxBatch+1)}
	c := mx.c
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		nc.Close()
		return nil, ErrClosed
	}
	c.muxWorkers.Add(2)
	c.muxConns[mc] = struct{}{}
	c.mu.Unlock()
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

// fail closes the connection; the reader and writer then fail what is
// queued and pending.
func (mc *muxConn) fail(err error) {
	mc.once.Do(func() {
		mc.err = err
		close(mc.closed)
		mc.nc.Close()
	})
}

func (mc *muxConn) write() {
	defer mc.mx.c.muxWorkers.Done()
	for {
		select {
		case <-mc.kick:
		case <-mc.closed:
			drain(mc.queue, mc.err)
			return
		}
		mc.writeBatch()
	}
}

// writeBatch writes what is queued, in order, in one pass.
func (mc *muxConn) writeBatch() {
	mc.wmu.Lock()
	defer mc.wmu.Unlock()
	batch := mc.batch[:0]
	for len(batch) < muxBatch {
		select {
		case q := <-mc.queue:
			batch = append(batch, q)
			continue
		default:
		}
		break
	}
	if len(batch) == muxBatch {
		mc.poke() // more may be queued
	}
	var err error
	for i, q := range batch {
		if err = mc.nc.Send(q.cmd, q.args...); err == nil {
			select {
			case mc.pending <- q:
				continue
			case <-mc.closed:
				err = mc.err
			}
		}
		mc.fail(err)
		for _, q := range batch[i:] {
			q.to.deliver(nil, err)
		}
		break
	}
	if err == nil && len(batch) > 0 {
		if err = mc.nc.Flush(); err != nil {
			mc.fail(err)
		}
	}
	mc.sweep(mc.pending)
	clear(batch)
	mc.batch = batch[:0]
}

func (mc *muxConn) poke() {
	select {
	case mc.kick <- struct{}{}:
	default:
	}
}

// stallTimeout is how long the reader waits for a reply that is due
// before it declares the connection broken.
func (mc *muxConn) stallTimeout() time.Duration {
	d := 10 * mc.mx.c.timeout
	if d < time.Second {
		d = time.Second
	}
	return d
}

func (mc *muxConn) read() {
	defer mc.mx.c.muxWorkers.Done()
	defer func() {
		mc.mx.c.mu.Lock()
		delete(mc.mx.c.muxConns, mc)
		mc.mx.c.mu.Unlock()
	}()
	for {
		var r *muxReq
		select {
		case r = <-mc.pending:
		case <-mc.closed:
			drain(mc.pending, mc.err)
			return
		}
		v, err := redis.ReceiveWithTimeout(mc.nc, mc.stallTimeout())
		if _, isReply := err.(redis.Error); err != nil && !isReply {
			mc.fail(err) // first, so that a retry from deliver dials anew
			r.to.deliver(nil, err)
			continue
		}
		r.to.deliver(v, err)
	}
}

// sweep fails what is left in ch (the queue or the pending requests) once
// the connection is closed. A request handed over just as the connection
// closed may land after the writer or reader drained ch for the last
// time; whoever handed it over then sweeps it, so that every request is
// answered exactly once (each receive takes a request from ch once).
func (mc *muxConn) sweep(ch chan *muxReq) {
	if mc.isClosed() {
		drain(ch, mc.err)
	}
}

func drain(ch chan *muxReq, err error) {
	if err == nil {
		err = errors.New("connection closed")
	}
	for {
		select {
		case r := <-ch:
			r.to.deliver(nil, err)
		default:
			return
		}
	}
}

// do queues one command and waits for its reply until ctx ends.
func (mx *mux) do(ctx context.Context, cmd string, args []any) (any, error) {
	mc, err := mx.conn(ctx)
	if err != nil {
		return nil, err
	}
	type result struct {
		v   any
		err error
	}
	res := make(chan result, 1)
	if err := mc.enqueue(&muxReq{cmd: cmd, args: args, to: replyFunc(func(v any, err error) { res <- result{v, err} })}); err != nil {
		return nil, err
	}
	select {
	case r := <-res:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// enqueue hands r to the connection: written at once by the caller when
// the connection is idle, else queued for the writer goroutine, which
// writes everything queued in one pass. It fails at once when the
// connection is closed or too much is queued. (Writing in the caller
// whenever nobody else was writing was measured: it halved the 64-client
// throughput on five masters, since callers then pay a system call per
// master and batches shrink. Writing only on an idle connection — nothing
// awaiting a reply — keeps the batches under load and saves a lone caller
// the hand-off: one client's lock+unlock on N=5 went from ~0.26 to
// ~0.19 ms.)
func (mc *muxConn) enqueue(r *muxReq) error {
	if mc.isClosed() {
		return mc.err
	}
	if mc.writeIdle(r) {
		return nil
	}
	select {
	case mc.queue <- r:
		mc.poke()
		mc.sweep(mc.queue)
		return nil
	case <-mc.closed:
		return mc.err
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
	if len(mc.queue) > 0 || len(mc.pending) > 0 {
		return false
	}
	err := mc.nc.Send(r.cmd, r.args...)
	if err == nil {
		mc.pending <- r // never full: it was empty
		if err = mc.nc.Flush(); err != nil {
			mc.fail(err) // the reader fails r
		}
		mc.sweep(mc.pending)
		return true
	}
	mc.fail(err)
	r.to.deliver(nil, err)
	return true
}

// submit sends a command without waiting: r.to gets the reply (or the
// failure) exactly once, without blocking the caller. Commands one
// goroutine submits reach the master in that order, also across a dial.
// r must not be touched again before its reply is delivered.
func (mx *mux) submit(r *muxReq) {
	mx.mu.Lock()
	if mc := mx.cur; mc != nil && !mc.isClosed() {
		mx.mu.Unlock()
		if err := mc.enqueue(r); err != nil {
			r.to.deliver(nil, err)
		}
		return
	}
	if _, err := mx.startDialLocked(); err != nil {
		mx.mu.Unlock()
		r.to.deliver(nil, err)
		return
	}
	mx.backlog = append(mx.backlog, r)
	mx.mu.Unlock()
}

// muxHandle lets the code written for a redis.Conn (the scripts' EVALSHA
// with its EVAL fallback) run over the mux.
type muxHandle struct {
	mx  *mux
	ctx context.Context
}

var _ redis.ConnWithTimeout = muxHandle{}

func (h muxHandle) Close() error { return nil }
func (h muxHandle) Err() error   { return nil }
func (h muxHandle) Do(cmd string, args ...any) (any, error) {
	return h.mx.do(h.ctx, cmd, args)
}
func (h muxHandle) DoWithTimeout(timeout time.Duration, cmd string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(h.ctx, timeout)
	defer cancel()
	return h.mx.do(ctx, cmd, args)
}
func (h muxHandle) Send(string, ...any) error {
	return errors.New("redlock: Send on a pipelined handle")
}
func (h muxHandle) Flush() error { return errors.New("redlock: Flush on a pipelined handle") }
func (h muxHandle) Receive() (any, error) {
	return nil, errors.New("redlock: Receive on a pipelined handle")
}
func (h muxHandle) ReceiveWithTimeout(time.Duration) (any, error) {
	return nil, errors.New("redlock: Receive on a pipelined handle")
}
