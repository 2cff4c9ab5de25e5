package redlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

// Pipelining (WithPipelining).
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
	dialing chan struct{} // closed when the dial under way ends
}

type muxReq struct {
	cmd  string
	args []any
	res  chan muxRes // buffered: the reader never blocks on a caller
}

type muxRes struct {
	v   any
	err error
}

type muxConn struct {
	mx      *mux
	nc      redis.Conn
	queue   chan *muxReq
	pending chan *muxReq
	closed  chan struct{}
	once    sync.Once
	err     error
}

// dialer is what a pool needs for pipelining: connections of its own.
type dialer interface {
	Dial(ctx context.Context) (redis.Conn, error)
}

// conn returns a live pipelined connection, dialing one if needed; the
// dial is bounded by ctx and shared by the callers that arrive meanwhile.
func (mx *mux) conn(ctx context.Context) (*muxConn, error) {
	for {
		mx.mu.Lock()
		if mc := mx.cur; mc != nil && !mc.isClosed() {
			mx.mu.Unlock()
			return mc, nil
		}
		if wait := mx.dialing; wait != nil {
			mx.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		mx.dialing = done
		mx.mu.Unlock()

		mc, err := mx.dial(ctx)
		mx.mu.Lock()
		mx.dialing = nil
		if err == nil {
			mx.cur = mc
		}
		mx.mu.Unlock()
		close(done)
		return mc, err
	}
}

func (mx *mux) dial(ctx context.Context) (*muxConn, error) {
	nc, err := mx.m.pool.(dialer).Dial(ctx)
	if err != nil {
		return nil, err
	}
	// Load the scripts first: a NOSCRIPT in the middle of a pipeline would
	// cost the caller a second round trip.
	all := []*scripts.Script{scripts.Release, scripts.Extend, scripts.FairAcquire, scripts.FairRelease}
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
	mc := &muxConn{mx: mx, nc: nc, queue: make(chan *muxReq, muxQueue),
		pending: make(chan *muxReq, muxQueue+muxBatch), closed: make(chan struct{})}
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
	batch := make([]*muxReq, 0, muxBatch)
	for {
		select {
		case r := <-mc.queue:
			batch = append(batch[:0], r)
		case <-mc.closed:
			drain(mc.queue, mc.err)
			return
		}
	more:
		for len(batch) < muxBatch {
			select {
			case r := <-mc.queue:
				batch = append(batch, r)
			default:
				break more
			}
		}
		var err error
		for i, r := range batch {
			if err = mc.nc.Send(r.cmd, r.args...); err == nil {
				select {
				case mc.pending <- r:
					continue
				case <-mc.closed:
					err = mc.err
				}
			}
			for _, r := range batch[i:] {
				r.res <- muxRes{err: err}
			}
			break
		}
		if err == nil {
			err = mc.nc.Flush()
		}
		if err != nil {
			mc.fail(err)
		}
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
		var re redis.Error
		if err != nil && !errors.As(err, &re) {
			r.res <- muxRes{err: err}
			mc.fail(err)
			continue
		}
		r.res <- muxRes{v: v, err: err}
	}
}

func drain(ch chan *muxReq, err error) {
	if err == nil {
		err = errors.New("connection closed")
	}
	for {
		select {
		case r := <-ch:
			r.res <- muxRes{err: err}
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
	r := &muxReq{cmd: cmd, args: args, res: make(chan muxRes, 1)}
	select {
	case mc.queue <- r:
	case <-mc.closed:
		return nil, mc.err
	default:
		return nil, errMuxBusy
	}
	select {
	case res := <-r.res:
		return res.v, res.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
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
