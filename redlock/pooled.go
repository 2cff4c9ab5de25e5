package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
)

// pooledTransport is the redigo Transport of a master whose commands each
// borrow a connection from the caller's pool (WithPipelining(false), or a
// pool that cannot dial a connection of its own). It is not Ordered: two
// commands in flight together run on two connections, in either order,
// so the Client chains a holder's commands (docs/design.md, "Ordering on
// each master"). Each command runs on a goroutine of its own, bounded by
// its deadline; Close waits for them.
type pooledTransport struct {
	addr string
	pool pool.Pool
	dial pool.Dialer // fresh connections for a re-send and the subscription; nil: the pool's
	// grace is how long past its deadline a command's reply is still
	// read (the per-master timeout): on a busy process the goroutine that
	// reads it may run later than the master answered (see silence).
	grace time.Duration
	clock clock.Clock // the client's: silence is measured on it

	// What silence measures, in nanoseconds since the Unix epoch.
	inflight  atomic.Int64 // commands sent and not yet answered or failed
	busySince atomic.Int64 // when inflight last rose from zero
	heard     atomic.Int64 // when a command last got its reply

	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
}

// Addr names the master (Transport).
func (p *pooledTransport) Addr() string { return p.addr }

// Send runs cmd on a pooled connection, on a goroutine of its own
// (Transport).
func (p *pooledTransport) Send(cmd *Command) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		cmd.Complete(nil, ErrClosed, SendInfo{})
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go p.run(cmd)
}

// run sends cmd, bounded by its deadline. A pooled connection that the
// master closed (it restarted, or dropped idle clients) fails at its first
// use; when cmd may be re-sent, run tries once more on a fresh connection
// within the same deadline (the other idle connections are likely as
// stale), and says so (SendInfo.Resent).
func (p *pooledTransport) run(cmd *Command) {
	defer p.wg.Done()
	ctx := context.Background()
	if !cmd.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, cmd.Deadline.Add(p.grace))
		defer cancel()
	}
	if p.inflight.Add(1) == 1 {
		p.busySince.Store(p.clock.Now().UnixNano())
	}
	defer p.inflight.Add(-1)
	v, err, sent := p.once(ctx, cmd, false)
	info := SendInfo{Sent: sent}
	if err != nil && cmd.Resend && brokenConn(err) {
		v, err, _ = p.once(ctx, cmd, true)
		info.Resent = true
	}
	cmd.Complete(v, err, info)
}

// once sends cmd once; fresh asks for a newly dialed connection rather
// than an idle one of the pool, where the pool can dial. sent reports
// whether the command was written (or may have been). A panic of redigo's
// parser (a hostile master, on a pool this package did not make) fails
// the command with ErrPanic.
func (p *pooledTransport) once(ctx context.Context, cmd *Command, fresh bool) (v any, err error, sent bool) {
	defer func() {
		if r := recover(); r != nil {
			v, err, sent = nil, panicError(r), true
		}
	}()
	var conn redis.Conn
	if fresh && p.dial != nil {
		conn, err = p.dial.Dial(ctx)
	} else {
		conn, err = p.pool.GetContext(ctx)
	}
	if err != nil {
		return nil, err, false
	}
	defer conn.Close()
	timeout := time.Until(cmd.Deadline.Add(p.grace))
	if cmd.Deadline.IsZero() {
		timeout = 0 // the connection's own read timeout
	} else if timeout <= 0 {
		return nil, context.DeadlineExceeded, false
	}
	if cmd.Script != nil {
		v, err = cmd.Script.s.DoKeys(conn, timeout, cmd.NumKeys, cmd.Args...)
	} else {
		v, err = redis.DoWithTimeout(conn, timeout, cmd.Name, cmd.Args...)
	}
	if _, ok := err.(redis.Error); ok || err == nil {
		p.heard.Store(p.clock.Now().UnixNano())
	}
	if re, ok := err.(redis.Error); ok {
		return nil, ReplyError(re), true
	}
	if err == nil && !cmd.Reply.Fits(v) {
		name := cmd.Name
		if cmd.Script != nil {
			name = cmd.Script.Name()
		}
		discard(conn)
		return nil, &desyncError{cmd: name, reply: describe(v)}, true
	}
	return v, err, true
}

// silence says how long the master has kept this process's readers
// waiting (silencer): with commands in flight, the time since the later
// of the last reply any of them got and the moment they began to be in
// flight. A master that answers steadily is not silent however long one
// command's reader took to run; a hung one is silent from its first
// unanswered command.
func (p *pooledTransport) silence() time.Duration {
	if p.inflight.Load() == 0 {
		return 0
	}
	since := max(p.heard.Load(), p.busySince.Load())
	return time.Duration(p.clock.Now().UnixNano() - since)
}

// Subscribe opens the master's release-notice subscription: on a
// connection of its own where the pool can dial one, else on one borrowed
// from the pool for as long as the subscription lives (Transport).
func (p *pooledTransport) Subscribe(ctx context.Context, notify func(channel, payload string)) (Subscription, error) {
	return subscribeRedigo(ctx, p.dial, p.pool, notify)
}

// Close waits for the commands in flight, each bounded by its deadline
// (Transport). The pool is the caller's: Close leaves it open.
func (p *pooledTransport) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// RedactError removes the pool's credentials from err (pool.Redactor).
func (p *pooledTransport) RedactError(err error) error {
	if r, ok := p.pool.(pool.Redactor); ok {
		return r.RedactError(err)
	}
	return err
}

// discard keeps a pooled connection that is out of step with its master
// from going back to the pool: redigo's pool closes a connection whose Err
// is set, and a read whose deadline has already passed fails and sets it.
// The replies already buffered (a few KiB at most) are read first.
func discard(conn redis.Conn) {
	for i := 0; i < 4096 && conn.Err() == nil; i++ {
		_, err := redis.ReceiveWithTimeout(conn, -time.Nanosecond)
		if _, isReply := err.(redis.Error); err != nil && !isReply {
			return
		}
	}
}

var (
	_ Transport = (*pooledTransport)(nil)
	_ Transport = (*mux)(nil)
	_ Ordered   = (*mux)(nil)
)

// Inspect runs Client.Inspect's commands on a connection of the pool
// (Inspector).
func (t *pooledTransport) Inspect(ctx context.Context, cmds []layout.Command) ([]any, error) {
	return inspectPool(ctx, t.pool, cmds)
}
