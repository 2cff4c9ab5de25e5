package redigot

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/transport"
)

// A lone caller's command on the pooled transport (Command.Wait: a Client
// of one master) runs on the caller's goroutine, on a connection the
// transport keeps for such commands, rather than on a goroutine of its own
// with a pooled connection: the caller writes it, waits for the whole
// reply to arrive without consuming it (pool.ReadWaiter), and reads it.
// That saves starting a goroutine and the hand-off of the reply back to
// the caller. The caller waits until the command's deadline or the end of
// its ctx (Command.Wait), not longer: then a goroutine takes the
// connection over and reads the reply by the bound run reads it by, so a
// late reply counts exactly as on run's path. A NOSCRIPT (answered by
// EVAL) and a re-send after the master closed the connection also go to
// that goroutine, which runs them as run does. Only one command uses the
// connection at a time: a command that finds it busy, or not dialed yet,
// takes run's path. The connection is dialed in the background, with the
// pool's dial (pool.WaitDialer), the first time a lone caller finds none;
// a pool that cannot give a ReadWaiter keeps every command on run's path.

// loneRedial is how long after a failed dial of the lone connection the
// next is tried.
const loneRedial = time.Second

// lone is the lone caller's connection.
type lone struct {
	// mu is held by the command using conn, from its write until its
	// reply is read (by the caller, or the goroutine that took over).
	mu      sync.Mutex
	conn    redis.Conn
	rw      pool.ReadWaiter
	dialing bool
	never   bool // the pool gave a connection without a ReadWaiter
	// failed is when the latest dial failed (zero: it did not).
	failed time.Time
	reads  atomic.Int64 // replies read by their caller, for tests
}

// sendLone runs cmd as a lone caller's command (see the top of this
// file) and reports whether it took it; when not, nothing was sent. Send
// has counted cmd in flight.
func (p *pooledTransport) sendLone(cmd *transport.Command) bool {
	if cmd.Wait == nil || cmd.Deadline.IsZero() || !p.lone.mu.TryLock() {
		return false
	}
	c := p.lone.conn
	if c != nil && c.Err() != nil {
		c.Close()
		p.lone.conn, p.lone.rw, c = nil, nil, nil
	}
	if c == nil {
		p.dialLoneLocked()
		p.lone.mu.Unlock()
		return false
	}
	p.beat.Enter()
	readBy := p.readBy(cmd)
	name, args := cmd.Name, cmd.Args
	if cmd.Script != nil {
		name, args = "EVALSHA", cmd.WireArgs()
	}
	err := c.Send(name, args...)
	if err == nil {
		err = c.Flush()
	}
	if err == nil && p.lone.rw.WaitReadable(cmd.Wait, cmd.Deadline) != nil {
		// The caller stops waiting: the reply is read as run reads it.
		go p.endLone(cmd, readBy, nil, false)
		return true
	}
	p.endLone(cmd, readBy, err, true)
	return true
}

// endLone reads the reply to cmd, written on the lone connection (unless
// the write failed with werr), by readBy, gives the connection up, and
// completes cmd. inline tells that it runs on the caller's goroutine,
// whose reply has arrived: what would wait for more (an EVAL after a
// NOSCRIPT, a re-send) goes to a goroutine of its own.
func (p *pooledTransport) endLone(cmd *transport.Command, readBy time.Time, werr error, inline bool) {
	var v any
	err := werr
	if err == nil {
		v, err = receive(p.lone.conn, max(time.Until(readBy), time.Nanosecond))
	}
	if cmd.Script != nil && IsNoScript(err) {
		if inline {
			go p.evalLone(cmd, readBy, err)
			return
		}
		v, err = p.evalOnLone(cmd, readBy, err)
	}
	p.doneLone(cmd, readBy, v, err, inline)
}

// evalLone runs cmd's script by EVAL on the lone connection, where its
// EVALSHA got NOSCRIPT, and completes cmd.
func (p *pooledTransport) evalLone(cmd *transport.Command, readBy time.Time, noScript error) {
	v, err := p.evalOnLone(cmd, readBy, noScript)
	p.doneLone(cmd, readBy, v, err, false)
}

// evalOnLone runs cmd's script by EVAL on the lone connection by readBy,
// as DoEvalSHA does after a NOSCRIPT (noScript, returned when no time is
// left).
func (p *pooledTransport) evalOnLone(cmd *transport.Command, readBy time.Time, noScript error) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fault.PanicError(r)
		}
	}()
	left := time.Until(readBy)
	if left <= 0 {
		return nil, noScript
	}
	eval := append([]any{cmd.Script.Source()}, cmd.WireArgs()[1:]...)
	return redis.DoWithTimeout(p.lone.conn, left, "EVAL", eval...)
}

// doneLone takes v and err as cmd's outcome on the lone connection, gives
// the connection up (closing it when it broke), and completes cmd.
func (p *pooledTransport) doneLone(cmd *transport.Command, readBy time.Time, v any, err error, inline bool) {
	c := p.lone.conn
	v, err = p.outcome(c, cmd, v, err)
	if inline {
		p.lone.reads.Add(1)
	}
	if c.Err() != nil {
		c.Close()
		p.lone.conn, p.lone.rw = nil, nil
	}
	p.lone.mu.Unlock()
	if inline && err != nil && cmd.Resend && fault.BrokenConn(err) {
		go p.finishLone(cmd, readBy, v, err)
		return
	}
	p.finishLone(cmd, readBy, v, err)
}

// finishLone completes cmd as run does (complete: a re-send on a fresh
// connection when the master closed this one) and ends its count in
// flight.
func (p *pooledTransport) finishLone(cmd *transport.Command, readBy time.Time, v any, err error) {
	defer p.ran()
	defer p.beat.Leave()
	get := p.life // complete gets a connection only to re-send
	if err != nil && cmd.Resend && fault.BrokenConn(err) {
		var cancel context.CancelFunc
		get, cancel = context.WithDeadline(p.life, readBy)
		defer cancel()
	}
	p.complete(get, readBy, cmd, v, true, err, false)
}

// dialLoneLocked dials the lone connection in the background, unless a
// dial is under way, the last failed less than loneRedial ago, or the
// pool cannot give a ReadWaiter (under lone.mu).
func (p *pooledTransport) dialLoneLocked() {
	wd, ok := p.dial.(pool.WaitDialer)
	if !ok || p.lone.dialing || p.lone.never || (!p.lone.failed.IsZero() && time.Since(p.lone.failed) < loneRedial) {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	p.lone.dialing = true
	go func() {
		defer p.wg.Done()
		c, rw, err := wd.DialWaiter(p.life)
		p.lone.mu.Lock()
		defer p.lone.mu.Unlock()
		p.lone.dialing = false
		switch {
		case err != nil:
			p.lone.failed = time.Now()
		case rw == nil:
			p.lone.never = true
			c.Close()
		case p.life.Err() != nil:
			c.Close()
		default:
			p.lone.conn, p.lone.rw, p.lone.failed = c, rw, time.Time{}
		}
	}()
}

// closeLone closes the lone connection (Close, once nothing uses it).
func (p *pooledTransport) closeLone() {
	p.lone.mu.Lock()
	defer p.lone.mu.Unlock()
	if p.lone.conn != nil {
		p.lone.conn.Close()
		p.lone.conn, p.lone.rw = nil, nil
	}
}
