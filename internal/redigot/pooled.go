package redigot

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/transport"
)

// pooledTransport is the redigo Transport of a master whose commands each
// borrow a connection from the caller's pool (WithPipelining(false), or a
// pool that cannot dial a connection of its own). It is not Ordered: two
// commands in flight together run on two connections, in either order,
// so the Client chains a holder's commands (docs/design.md, "Ordering on
// each master"). Each command runs on a goroutine of its own, bounded past
// its deadline (see run); Close waits for them.
type pooledTransport struct {
	addr string
	pool pool.Pool
	dial pool.Dialer // fresh connections for a re-send and the subscription; nil: the pool's
	// grace is how long past its deadline a command's reply is still
	// read when its master is silent (the per-master timeout); stall
	// (lateBound), as long as it is not: on a busy process the goroutine
	// that reads a reply may run much later than the master answered.
	grace, stall time.Duration
	clock        clock.Clock   // the client's: silence is measured on it
	realClock    bool          // clock is clock.Real(): stalls count (stalls.in)
	stalls       *stall.Stalls // the client's stall detector

	// unheard is when the master's silence began, as the time since epoch
	// on clock plus 1: the send of the earliest command in flight since
	// the last reply, or that reply when commands were in flight past it
	// (0: nothing in flight since the last reply; heard, readBy). What
	// silence measures. (Since epoch, so that the real clock's monotonic
	// reading is used: a step of the wall clock is neither silence nor
	// its end. Read with Now().Sub, not Since: a test's clock may count
	// Since calls as the client's own measures of elapsed time.)
	unheard atomic.Int64
	epoch   time.Time
	// beat tells, while commands are in flight, how far this process is
	// behind on its timers (a stall it has not yet seen a timer fire late
	// for): silence leaves that much out.
	beat *stall.Beat

	// life ends when Close begins: it ends every wait for a connection
	// (for the pool, a dial, a TLS handshake), so that nothing holds Close
	// that was never sent. endLife ends it.
	life    context.Context
	endLife context.CancelFunc

	wg      sync.WaitGroup
	mu      sync.Mutex
	running int // commands in flight (run's goroutines, a lone caller's command), under mu
	// busy is when running last rose from 0, as the time since epoch on
	// clock (under mu): no command of this transport was unanswered
	// before it that is still in flight.
	busy   time.Duration
	closed bool
	// heardAt is the value heard gave unheard at the latest reply that
	// came while other commands were in flight (0: none did, or a command
	// was sent since), under mu.
	heardAt int64

	// lone is the connection of a lone caller's commands (pooled_lone.go).
	// Its mu comes before mu.
	lone lone
}

// newPooled returns the pooled transport of the master named addr.
func newPooled(addr string, p pool.Pool, dial pool.Dialer, timeout time.Duration, st *stall.Stalls) *pooledTransport {
	clk := st.Clock()
	life, endLife := context.WithCancel(context.Background())
	return &pooledTransport{addr: addr, pool: p, dial: dial, grace: timeout, stall: stall.LateBound(timeout),
		clock: clk, realClock: clk == clock.Real(), stalls: st, beat: st.NewBeat(max(timeout/4, time.Millisecond)), epoch: clk.Now(),
		life: life, endLife: endLife}
}

// Addr names the master (Transport).
func (p *pooledTransport) Addr() string { return p.addr }

// Send runs cmd on a pooled connection, on a goroutine of its own
// (Transport). Once Close has begun, it still runs an Undo sent while
// commands are in flight to a master that is not silent: a failed
// attempt's grant read while Close waits for it is rolled back, not left
// until its TTL.
func (p *pooledTransport) Send(cmd *transport.Command) {
	p.mu.Lock()
	if p.closed && (!cmd.Undo || p.running == 0 || p.Silence() >= p.grace) {
		p.mu.Unlock()
		cmd.Complete(nil, transport.ErrClosed, transport.SendInfo{})
		return
	}
	if cmd.DropWhenDown {
		if err := p.downLocked(); err != nil {
			p.mu.Unlock()
			cmd.Complete(nil, err, transport.SendInfo{})
			return
		}
	}
	if p.running == 0 {
		p.busy = p.clock.Now().Sub(p.epoch)
	}
	afterClose := p.closed
	p.running++
	p.heardAt = 0 // sent after the reply: only an answer ends its wait (ran)
	p.wg.Add(1)
	p.mu.Unlock()
	if !afterClose && p.sendLone(cmd) {
		return
	}
	go p.run(cmd, afterClose)
}

// run sends cmd and reads its reply past its deadline: up to lateBound
// (one per-master timeout, at least a second), unless the master has not
// answered, since the earliest command it left unanswered, for longer
// than the command's own wait and at least a per-master timeout (silence;
// a stall of this process does not count; see readBy), and then up to
// one per-master timeout (grace), so that a hung master does not pile up
// connections nor hold Close long. The round does not wait for
// that (collect counts a silent master failed at its timeout); a reply
// read late is a late reply. What the bound is for is a busy process: a
// goroutine that did not run for longer than the timeout would otherwise
// find its read's deadline passed with the reply waiting in the socket,
// and fail a master that answered in time. Close waits for these reads,
// so a master that stops answering while one is in flight holds Close up
// to lateBound past that command's deadline. A pooled connection that
// the master closed (it restarted, or dropped idle clients) fails at its
// first use; when cmd may be re-sent, run tries once more on a fresh
// connection within the same bound (the other idle connections are
// likely as stale), and says so (SendInfo.Resent).
//
// Getting the connection (waiting for the pool, dialing, the TLS
// handshake, AUTH) has the same bound, and Close ends that wait at once,
// since nothing was sent yet: a master that accepts connections and never
// finishes a handshake does not hold Close. An Undo sent after Close
// began (afterClose), which Send lets through only to a master that
// answers, keeps its wait.
func (p *pooledTransport) run(cmd *transport.Command, afterClose bool) {
	defer p.ran()
	p.beat.Enter()
	defer p.beat.Leave()
	get := p.life
	if afterClose {
		get = context.Background()
	}
	readBy := p.readBy(cmd)
	if !readBy.IsZero() {
		var cancel context.CancelFunc
		get, cancel = context.WithDeadline(get, readBy)
		defer cancel()
	}
	v, sent, err := p.once(get, readBy, cmd, false)
	p.complete(get, readBy, cmd, v, sent, err, afterClose)
}

// ran ends the count of a command in flight that Send began. The last
// to end, when the master's silence began at a reply (heard) and nothing
// was sent since (Send clears heardAt), leaves the master not silent:
// the commands that waited past that reply, all sent before it, were
// answered (or a master hung after its last answer, with nothing left in
// flight, is not silent either, as one whose every command was answered).
func (p *pooledTransport) ran() {
	p.mu.Lock()
	p.running--
	if p.running == 0 && p.heardAt != 0 {
		p.unheard.CompareAndSwap(p.heardAt, 0)
	}
	p.mu.Unlock()
	p.wg.Done()
}

// readBy returns the latest cmd's reply is read (zero: the connection's
// own read timeout; see run), and starts the silence it may begin. A
// master silent for longer than the command's own wait (what is left
// until its deadline, at least the per-master timeout) is taken for hung:
// one timeout's grace. One silent for less is as slow as the Client's
// round allows (a wait raised by the adaptive bound, a release's):
// lateBound, so that its answer, read late, is noted by the Client and
// its bound follows the host.
func (p *pooledTransport) readBy(cmd *transport.Command) time.Time {
	if cmd.Deadline.IsZero() {
		return time.Time{}
	}
	bound := p.stall
	if p.Silence() >= max(p.grace, time.Until(cmd.Deadline)) {
		bound = p.grace
	}
	if p.unheard.Load() == 0 {
		p.unheard.CompareAndSwap(0, int64(p.clock.Now().Sub(p.epoch))+1)
	}
	return cmd.Deadline.Add(bound)
}

// complete completes cmd with the outcome of its first try (v, sent,
// err), after trying once more on a fresh connection, within get and
// readBy, when the master closed the connection and cmd may be re-sent.
func (p *pooledTransport) complete(get context.Context, readBy time.Time, cmd *transport.Command, v any, sent bool, err error, afterClose bool) {
	info := transport.SendInfo{Sent: sent}
	if err != nil && cmd.Resend && fault.BrokenConn(err) {
		v, sent, err = p.once(get, readBy, cmd, true)
		info.Resent = true
	}
	if err != nil && !sent && !afterClose && p.life.Err() != nil {
		err = transport.ErrClosed // Close ended the wait for a connection
	}
	cmd.Complete(v, answered(err), info)
}

// once sends cmd once, on a connection got within ctx, and reads its reply
// by readBy (zero: within the connection's own read timeout); fresh asks
// for a newly dialed connection rather than an idle one of the pool, where
// the pool can dial. sent reports whether the command was written (or may
// have been). A panic of redigo's parser (a hostile master, on a pool this
// package did not make) fails the command with ErrPanic.
func (p *pooledTransport) once(ctx context.Context, readBy time.Time, cmd *transport.Command, fresh bool) (v any, sent bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, sent, err = nil, true, fault.PanicError(r)
		}
	}()
	var conn redis.Conn
	if fresh && p.dial != nil {
		conn, err = p.dial.Dial(ctx)
	} else {
		conn, err = p.pool.GetContext(ctx)
	}
	if err != nil {
		return nil, false, err
	}
	defer conn.Close()
	var timeout time.Duration // 0: the connection's own read timeout
	if !readBy.IsZero() {
		if timeout = time.Until(readBy); timeout <= 0 {
			return nil, false, context.DeadlineExceeded
		}
	}
	if cmd.Script != nil {
		v, err = DoEvalSHA(conn, timeout, cmd.Script.Source(), cmd.WireArgs())
	} else {
		v, err = redis.DoWithTimeout(conn, timeout, cmd.Name, cmd.Args...)
	}
	v, err = p.outcome(conn, cmd, v, err)
	return v, true, err
}

// outcome reads conn's reply v (or err) to cmd as the command's outcome:
// an error reply as a transport.ReplyError, a reply that does not fit as
// a DesyncError (conn is then discarded). Any reply ends the master's
// silence.
func (p *pooledTransport) outcome(conn redis.Conn, cmd *transport.Command, v any, err error) (any, error) {
	re, isReply := replyTo(err)
	if isReply || err == nil {
		p.heard()
	}
	if isReply {
		return nil, transport.ReplyError(re)
	}
	if err == nil && !cmd.Reply.Fits(v) {
		name := cmd.Name
		if cmd.Script != nil {
			name = cmd.Script.Name()
		}
		discard(conn)
		return nil, &fault.DesyncError{Cmd: name, Reply: fault.Describe(v)}
	}
	return v, err
}

// heard ends the master's silence at a reply to one of its commands in
// flight (counted in running until ran): with none other in flight, it is
// not silent; the others, sent before the reply or not, wait afresh from
// it — a master that answered one command and then stopped is silent
// from that answer, not "heard" for as long as the others wait.
func (p *pooledTransport) heard() {
	p.mu.Lock()
	p.heardAt = 0
	if p.running > 1 {
		p.heardAt = int64(p.clock.Now().Sub(p.epoch)) + 1
	}
	p.unheard.Store(p.heardAt)
	p.mu.Unlock()
}

// silence says how long the master has kept this process waiting
// (Silencer): the time since the earliest command it has not answered
// was sent, or since its latest reply when that came later (heard),
// less what of it this process did not run (on the real clock: the
// latest stall it saw, stalls.in, or how far it is behind on its
// timers, beat, whichever is more). A master that answers steadily is not silent however long one
// command's reader took to run; a hung one is silent from its first
// unanswered command, whatever came and went unanswered since.
func (p *pooledTransport) Silence() time.Duration {
	u := p.unheard.Load()
	if u == 0 {
		return 0
	}
	s := p.clock.Now().Sub(p.epoch) - time.Duration(u-1)
	if p.realClock {
		s -= max(p.beat.Overdue(), p.stalls.Behind(), p.stalls.In(time.Now(), s))
	}
	return max(s, 0)
}

// downLocked fails (a downError) when the master is down: commands to it
// are in flight and it has been silent (Silence) for longer than the
// per-master timeout, counted from no earlier than when the commands now
// in flight began to be (busy), as a pipelined connection is down
// (muxConn.down). A command worthless late (Command.DropWhenDown: an
// acquisition, an extension) sent now would only wait out its deadline on
// a connection of its own; its round, meanwhile, may be unable to decide
// without it (two grants and two refusals of five), and its grants would
// keep the key from everyone else until then. With nothing in flight the
// master is not down, whatever it last did: the next command goes, and
// its answer ends the silence once the master runs again; a command that
// went unanswered before an idle spell does not make the master down for
// the commands sent together after it. Only on the real clock, as the
// pipelined connection measures its silence in real time: a test's fake
// clock, which may jump an hour while a release is in flight, never
// makes a master down. Under p.mu.
func (p *pooledTransport) downLocked() error {
	if p.running == 0 || !p.realClock {
		return nil
	}
	if s := min(p.Silence(), p.clock.Now().Sub(p.epoch)-p.busy); s > p.grace {
		return &transport.NotSentError{Since: time.Now().Add(p.grace - s), Err: &downError{d: p.grace, pooled: true}}
	}
	return nil
}

// Down is downLocked under p.mu (Downer).
func (p *pooledTransport) Down() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.downLocked()
}

// Subscribe opens the master's release-notice subscription: on a
// connection of its own where the pool can dial one, else on one borrowed
// from the pool for as long as the subscription lives (Transport).
func (p *pooledTransport) Subscribe(ctx context.Context, notify func(channel, payload string)) (transport.Subscription, error) {
	return subscribeRedigo(ctx, p.dial, p.pool, notify)
}

// Close ends every wait for a connection (nothing was sent on those), and
// waits for the commands in flight, each bounded as run says, and for the
// rollbacks their late replies send (Transport). The pool is the
// caller's: Close leaves it open.
func (p *pooledTransport) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.endLife()
	p.wg.Wait()
	p.closeLone()
	p.beat.Stop()
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
		if _, isReply := replyTo(err); err != nil && !isReply {
			return
		}
	}
}

var (
	_ transport.Transport = (*pooledTransport)(nil)
	_ transport.Transport = (*mux)(nil)
	_ transport.Ordered   = (*mux)(nil)
	_ transport.Silencer  = (*mux)(nil)
	_ transport.Silencer  = (*pooledTransport)(nil)
	_ transport.Downer    = (*pooledTransport)(nil)
)

// Inspect runs Client.Inspect's commands on a connection of the pool
// (Inspector).
func (p *pooledTransport) Inspect(ctx context.Context, cmds []layout.Command) ([]any, error) {
	return inspectPool(ctx, p.pool, cmds)
}
