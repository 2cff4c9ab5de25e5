package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// Link is one Client's transport to one simulated master
// (transport.Transport). Each command crosses the network after a delay the
// master's weather draws, runs on the master (or waits in a frozen one),
// and its reply comes back after another delay — or is lost, or comes
// after the caller's deadline. An ordered link (transport.Ordered, like the
// pipelined transport) keeps one connection whose commands reach the
// master in Send order, lets a reply count past the command's deadline
// up to a bound of its own, and then gives the connection up (its
// commands fail; those still in the master's socket may run later, after
// commands of the next connection); on a new connection it loads every
// script first. An unordered link (like the pooled transport) sends each
// command on a connection of its own, fails it at its deadline and falls
// back to EVAL on NOSCRIPT. Both re-send a command marked Resend once
// when a crash reset its connection.
type Link struct {
	m       *Master
	ordered bool
	bound   time.Duration // how long past its deadline an ordered link waits for a reply
	faults  bool          // whether the link applies the master's weather
	// w, when set, runs the link's deliveries in a seeded order (see
	// wire); else each runs on a goroutine of its own (time.AfterFunc).
	w *wire

	mu       sync.Mutex
	seed     uint64
	pcg      rand.PCG
	drawAt   time.Time
	drawN    uint64
	rng      *rand.Rand // draws from pcg
	sent     uint64     // commands sent (op.seq)
	subsMade uint64     // subscriptions made
	closed   bool
	pending  map[*op]struct{}
	conn     *conn
	wg       sync.WaitGroup // callbacks in progress
	subs     map[*subscription]struct{}
	stats    *Stats
}

type conn struct {
	id         uint64
	gen        uint64
	lastArrive time.Time
	broken     bool
	// An ordered link's requests wait in queue (under the link's mu)
	// until their arrival; deliver is held while they are handed to the
	// master, one after the other: timers due at one instant fire in no
	// fixed order.
	queue   []arrival
	deliver sync.Mutex
}

type arrival struct {
	at      time.Time
	r       *request
	o       *op
	dropReq bool
}

type op struct {
	seq      uint64 // the link's count of commands when it was sent
	cmd      *transport.Command
	l        *Link
	c        *conn
	done     bool
	sent     bool
	resent   bool
	dup      bool        // complete twice (a transport fault)
	giveUp   func() bool // cancels the give-up
	dupFired bool
}

var (
	_ transport.Transport = (*Link)(nil)
	_ transport.Ordered   = (*Link)(nil)
	_ transport.Inspector = (*Link)(nil)
)

// NewLink returns a transport to m for one Client; rng draws its delays
// and faults.
func NewLink(m *Master, ordered bool, rng *rand.Rand, stats *Stats) *Link {
	l := &Link{m: m, ordered: ordered, bound: 500 * time.Millisecond, faults: true, seed: rng.Uint64(),
		pending: map[*op]struct{}{}, subs: map[*subscription]struct{}{}, stats: stats}
	l.rng = rand.New(&l.pcg)
	return l
}

// drawLocked reseeds the link's rng for the draws of one command: from
// the link's seed, the virtual instant and how many commands the link
// drew for at that instant before. A replay whose schedule drifted
// somewhere (Go's scheduler is not seeded) then still draws the
// same delays and losses for the commands sent at the same instants,
// instead of every later draw of the link shifting by one.
func (l *Link) drawLocked() {
	now := time.Now()
	if !now.Equal(l.drawAt) {
		l.drawAt, l.drawN = now, 0
	}
	l.drawN++
	l.pcg.Seed(l.seed^uint64(now.UnixNano()), l.drawN)
}

// Addr implements transport.Transport.
func (l *Link) Addr() string { return l.m.addr }

// Ordered implements transport.Ordered.
func (l *Link) Ordered() bool { return l.ordered }

var errClosed = fmt.Errorf("sim: %w", redlock.ErrClosed)

// Send implements transport.Transport.
func (l *Link) Send(cmd *transport.Command) {
	// A transport's Send takes time (a lock, a queue): let others run
	// meanwhile, as often as the link's rng says. (It must not block:
	// the Client may call it holding a lock of its own.)
	l.mu.Lock()
	l.drawLocked()
	yields := l.rng.IntN(8)
	dup := l.faults && l.rng.Float64() < l.m.currentWeather().DupComplete
	giveUpKey := l.rng.Uint64()
	l.mu.Unlock()
	for range max(yields-2, 0) {
		runtime.Gosched()
	}
	w := l.m.currentWeather()
	gen, up := l.m.generation()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		cmd.Complete(nil, errClosed, transport.SendInfo{})
		return
	}
	l.sent++
	o := &op{seq: l.sent, cmd: cmd, l: l}
	if !l.ordered || l.conn == nil || l.conn.broken || l.conn.gen != gen {
		if !up {
			l.mu.Unlock()
			cmd.Complete(nil, &connError{"dial: connection refused"}, transport.SendInfo{})
			return
		}
		l.conn = &conn{id: l.m.connID(), gen: gen}
		if l.ordered {
			l.loadScriptsLocked(l.conn, w)
		}
	}
	o.c = l.conn
	o.dup = dup
	l.pending[o] = struct{}{}
	o.sent = true
	l.wg.Add(1)
	if l.ordered {
		o.giveUp = l.after(time.Until(cmd.Deadline)+l.bound, giveUpKey, false, func() { l.giveUp(o) })
	} else {
		o.giveUp = l.after(time.Until(cmd.Deadline), giveUpKey, false, func() { l.giveUp(o) })
	}
	l.sendLocked(o, o.c, w, wireArgs(cmd, false))
	l.mu.Unlock()
}

// loadAll stands for SCRIPT LOAD of every script, in one request.
var loadAll = []string{"SCRIPT", "LOAD-ALL"}

// loadScriptsLocked sends SCRIPT LOAD of every script first on a new
// connection, as the pipelined transport does.
func (l *Link) loadScriptsLocked(c *conn, w weather) {
	l.sendLocked(nil, c, w, loadAll)
}

// sendLocked puts args on the network to the master on connection c,
// for o (nil: a command of the link's own whose reply nobody reads).
func (l *Link) sendLocked(o *op, c *conn, w weather, args []string) {
	now := time.Now()
	l.drawLocked()
	out, back := l.delayLocked(w), l.delayLocked(w)
	dropReq := l.faults && l.rng.Float64() < w.DropReq
	dropReply := l.faults && l.rng.Float64() < w.DropReply
	if l.faults && o != nil && l.rng.Float64() < w.LateReply {
		back += o.cmd.Deadline.Sub(now) + time.Duration(l.rng.Int64N(int64(200*time.Millisecond)))
	}
	atDeadline := l.faults && o != nil && l.rng.Float64() < w.AtDeadline
	if l.faults && o != nil && plainAcquire(o.cmd) && l.rng.Float64() < l.atDeadlineSet(w) {
		atDeadline = true
	}
	arriveKey, replyKey := l.rng.Uint64(), l.rng.Uint64()
	edge := l.drawEdgeLocked()
	arrive := now.Add(out)
	if l.ordered {
		if arrive.Before(c.lastArrive) {
			arrive = c.lastArrive
		}
		c.lastArrive = arrive
	}
	l.stats.Commands.Add(1)
	r := &request{conn: c.id, gen: c.gen, args: args}
	r.done = func(reply any, err error) {
		if o == nil {
			return
		}
		if dropReply && err == nil {
			return // the reply is lost: the command ran, the give-up completes it
		}
		race := false
		if atDeadline {
			if d := time.Until(o.cmd.Deadline); d > 0 {
				back = d
				switch edge {
				case edgeRace:
					race = true
				case edgeBefore:
					back = max(d-time.Nanosecond, time.Nanosecond)
				}
			}
		}
		l.after(back, replyKey, race, func() { l.replied(o, c, reply, err) })
	}
	a := arrival{at: arrive, r: r, o: o, dropReq: dropReq}
	if !l.ordered {
		l.after(arrive.Sub(now), arriveKey, false, func() { l.arrive(c, a) })
		return
	}
	c.queue = append(c.queue, a)
	l.after(arrive.Sub(now), arriveKey, false, func() { l.pump(c) })
}

// pump hands an ordered connection's requests that arrived to the
// master, in order.
func (l *Link) pump(c *conn) {
	c.deliver.Lock()
	defer c.deliver.Unlock()
	for {
		l.mu.Lock()
		if len(c.queue) == 0 || c.queue[0].at.After(time.Now()) {
			l.mu.Unlock()
			return
		}
		a := c.queue[0]
		c.queue = c.queue[1:]
		l.mu.Unlock()
		l.arrive(c, a)
	}
}

// arrive hands a request to the master, or breaks the connection under
// it (a dropped request: it never runs).
func (l *Link) arrive(c *conn, a arrival) {
	if a.dropReq {
		if a.o != nil {
			l.replied(a.o, c, nil, &connError{"write: broken pipe"})
		}
		return
	}
	l.m.Do(a.r)
}

// after runs f after d: on the wire, ordered by key among the
// deliveries of its instant (race: beside the instant's other wake-ups),
// or, without a wire, on a goroutine of its own. The func it returns
// cancels it.
func (l *Link) after(d time.Duration, key uint64, race bool, f func()) func() bool {
	if l.w == nil {
		return time.AfterFunc(d, f).Stop
	}
	return l.w.after(d, key, race, f)
}

func (l *Link) delayLocked(w weather) time.Duration {
	d := 20*time.Microsecond + time.Duration(l.rng.Int64N(int64(200*time.Microsecond)))
	if l.faults && w.Delay > 0 {
		d += time.Duration(l.rng.Int64N(int64(w.Delay)))
	}
	return d
}

// replied takes a reply (or a broken connection) for o.
func (l *Link) replied(o *op, c *conn, reply any, err error) {
	l.mu.Lock()
	if o.done {
		dup := o.dup && !o.dupFired && !l.closed
		o.dupFired = o.dupFired || dup
		l.mu.Unlock()
		if dup {
			l.stats.add(&l.stats.DupCompletions)
			o.cmd.Complete(reply, err, transport.SendInfo{Sent: true, Resent: o.resent})
		}
		return
	}
	var re ReplyError
	if errors.As(err, &re) && o.cmd.Script != nil && len(re) >= 8 && re[:8] == "NOSCRIPT" &&
		(!l.ordered || o.cmd.MayRunLate) && !l.closed {
		// EVAL behind whatever was sent since.
		l.sendLocked(o, c, l.m.currentWeather(), wireArgs(o.cmd, true))
		l.mu.Unlock()
		return
	}
	var ce *connError
	if errors.As(err, &ce) && ce.msg == "write: connection reset by peer" && o.cmd.Resend && !o.resent && !l.closed {
		// The master closed the connection before answering: send once
		// more, on a new connection.
		gen, up := l.m.generation()
		if up {
			o.resent = true
			nc := &conn{id: l.m.connID(), gen: gen}
			if l.ordered {
				if l.conn == c {
					l.conn = nc
				}
				l.loadScriptsLocked(nc, l.m.currentWeather())
			}
			o.c = nc
			l.sendLocked(o, nc, l.m.currentWeather(), wireArgs(o.cmd, false))
			l.mu.Unlock()
			return
		}
	}
	if err != nil && l.ordered {
		l.breakLocked(c)
	}
	l.finishLocked(o)
	l.mu.Unlock()
	o.cmd.Complete(reply, err, transport.SendInfo{Sent: o.sent, Resent: o.resent})
	l.wg.Done()
}

func (l *Link) finishLocked(o *op) {
	o.done = true
	o.giveUp()
	delete(l.pending, o)
}

// giveUp fails o at its deadline (unordered) or its deadline and the
// link's bound (ordered: the connection is given up with every command
// on it).
func (l *Link) giveUp(o *op) {
	l.mu.Lock()
	if o.done {
		l.mu.Unlock()
		return
	}
	var fail []*op
	if l.ordered {
		for p := range l.pending {
			if p.c == o.c {
				fail = append(fail, p)
			}
		}
		// In the order they were sent, not the map's.
		slices.SortFunc(fail, func(a, b *op) int { return cmp.Compare(a.seq, b.seq) })
		l.breakLocked(o.c)
	} else {
		fail = []*op{o}
	}
	for _, p := range fail {
		l.finishLocked(p)
	}
	l.mu.Unlock()
	for _, p := range fail {
		p.cmd.Complete(nil, fmt.Errorf("sim: %s: %w", l.m.addr, context.DeadlineExceeded), transport.SendInfo{Sent: true, Resent: p.resent})
		l.wg.Done()
	}
}

func (l *Link) breakLocked(c *conn) {
	c.broken = true
	if l.conn == c {
		l.conn = nil
	}
}

// Close implements transport.Transport: it fails what is pending.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	var fail []*op
	for p := range l.pending {
		fail = append(fail, p)
	}
	slices.SortFunc(fail, func(a, b *op) int { return cmp.Compare(a.seq, b.seq) })
	for _, p := range fail {
		l.finishLocked(p)
	}
	subs := make([]*subscription, 0, len(l.subs))
	for s := range l.subs {
		subs = append(subs, s)
	}
	l.mu.Unlock()
	for _, p := range fail {
		p.cmd.Complete(nil, errClosed, transport.SendInfo{Sent: p.sent, Resent: p.resent})
		l.wg.Done()
	}
	for _, s := range subs {
		s.Close()
	}
	l.wg.Wait()
	return nil
}

// wireArgs returns cmd as the master reads it: EVALSHA (or EVAL) with the
// key count, or the plain command.
func wireArgs(cmd *transport.Command, eval bool) []string {
	var out []string
	if cmd.Script != nil {
		out = make([]string, 0, 3+len(cmd.Args))
		if eval {
			out = append(out, "EVAL", cmd.Script.Source())
		} else {
			out = append(out, "EVALSHA", cmd.Script.SHA())
		}
		out = append(out, strconv.Itoa(cmd.NumKeys))
	} else {
		out = make([]string, 0, 1+len(cmd.Args))
		out = append(out, cmd.Name)
	}
	for _, a := range cmd.Args {
		out = append(out, argString(a))
	}
	return out
}

func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case int:
		return strconv.Itoa(v)
	}
	return fmt.Sprint(a)
}

// Subscribe implements transport.Transport.
func (l *Link) Subscribe(ctx context.Context, notify func(channel, payload string)) (transport.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	gen, up := l.m.generation()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errClosed
	}
	if !up {
		return nil, &connError{"dial: connection refused"}
	}
	l.subsMade++ // its delays' stream: the link's count, not the master's (whose order the scheduler picks)
	s := &subscription{l: l, gen: gen, notify: notify, done: make(chan struct{}), live: map[string]bool{},
		rng: rand.New(rand.NewPCG(l.seed, 1<<32+l.subsMade))}
	l.subs[s] = struct{}{}
	return s, nil
}

// subscription is a release-notice subscription on a master.
type subscription struct {
	l      *Link
	gen    uint64
	notify func(channel, payload string)
	rng    *rand.Rand // its delays (under mu)

	mu       sync.Mutex
	channels []string
	live     map[string]bool
	done     chan struct{}
	closed   bool
	inflight sync.WaitGroup

	// deliver is held (read) while notify runs and (write) while the
	// subscription ends, so that notify is never called after Done.
	deliver sync.RWMutex
	ended   bool // under deliver
}

func (s *subscription) Set(ctx context.Context, channels []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	old := s.channels
	s.channels = append([]string(nil), channels...)
	live := make(map[string]bool, len(channels))
	for _, ch := range channels {
		live[ch] = true
	}
	s.live = live
	s.mu.Unlock()
	if !s.l.m.subscribe(s, old, channels) {
		s.broke()
		return &connError{"read: connection reset by peer"}
	}
	return nil
}

func (s *subscription) Live(channel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed && s.live[channel]
}

func (s *subscription) Done() <-chan struct{} { return s.done }

// push delivers a message after a network delay. The master's lock is
// held: it must not block nor take the link's lock.
func (s *subscription) push(channel, payload string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	d := 20*time.Microsecond + time.Duration(s.rng.Int64N(int64(300*time.Microsecond)))
	key := s.rng.Uint64()
	s.inflight.Add(1)
	s.mu.Unlock()
	s.l.after(d, key, false, func() {
		defer s.inflight.Done()
		s.deliver.RLock()
		defer s.deliver.RUnlock()
		if !s.ended {
			s.notify(channel, payload)
		}
	})
}

// broke ends the subscription as a broken connection does.
func (s *subscription) broke() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	chans := s.channels
	s.mu.Unlock()
	s.deliver.Lock()
	s.ended = true
	s.deliver.Unlock()
	close(s.done)
	s.l.m.subscribe(s, chans, nil)
	s.l.mu.Lock()
	delete(s.l.subs, s)
	s.l.mu.Unlock()
}

func (s *subscription) Close() error {
	s.broke()
	s.inflight.Wait()
	return nil
}

// Inspect implements transport.Inspector: the commands go to the master in
// one request on a connection of their own, through the master's
// weather, and the replies come back unless ctx ends first.
func (l *Link) Inspect(ctx context.Context, cmds []layout.Command) ([]any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := l.m.currentWeather()
	gen, up := l.m.generation()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errClosed
	}
	if !up {
		l.mu.Unlock()
		return nil, &connError{"dial: connection refused"}
	}
	l.drawLocked()
	out, back := l.delayLocked(w), l.delayLocked(w)
	dropReq := l.faults && l.rng.Float64() < w.DropReq
	dropReply := l.faults && l.rng.Float64() < w.DropReply
	arriveKey, replyKey := l.rng.Uint64(), l.rng.Uint64()
	id := l.m.connID()
	l.mu.Unlock()
	l.stats.Commands.Add(1)
	batch := make([][]string, len(cmds))
	for i, c := range cmds {
		args := make([]string, 0, 1+len(c.Args))
		args = append(args, c.Name)
		for _, a := range c.Args {
			args = append(args, argString(a))
		}
		batch[i] = args
	}
	type result struct {
		v   any
		err error
	}
	res := make(chan result, 1)
	r := &request{conn: id, gen: gen, batch: batch, done: func(reply any, err error) {
		if dropReply && err == nil {
			return
		}
		l.after(back, replyKey, false, func() { res <- result{reply, err} })
	}}
	if !dropReq {
		l.after(out, arriveKey, false, func() { l.m.Do(r) })
	}
	select {
	case v := <-res:
		if v.err != nil {
			return nil, v.err
		}
		return v.v.([]any), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// How a reply that comes at its command's deadline meets the caller's
// timer of that instant: it races it (on a goroutine of its own, the
// scheduler's choice), comes a nanosecond before it, or after whatever
// the timer set going.
const (
	edgeRace = iota
	edgeBefore
	edgeAfter
)

// drawEdge draws how a reply at its deadline meets the caller's timer:
// it races it on a racing wire (and without a wire, where every delivery
// races whatever else is due at its instant), else comes before or after.
func (l *Link) drawEdgeLocked() int {
	n := l.rng.IntN(2)
	if l.w == nil || l.w.racing {
		return edgeRace
	}
	return edgeBefore + n
}

// atDeadlineSet is w's share of plain acquisitions whose reply comes at
// the deadline: on a racing wire twice the weather's (at most a half, or
// the weather's), so that the runs that race still race as many SETs,
// all told, as when every run raced.
func (l *Link) atDeadlineSet(w weather) float64 {
	if l.w != nil && l.w.racing {
		return max(w.AtDeadlineSet, min(2*w.AtDeadlineSet, 0.5))
	}
	return w.AtDeadlineSet
}

// plainAcquire reports whether cmd is a plain acquisition: its SET NX PX,
// or a waiting attempt's wait_acquire script, which runs the same SET.
func plainAcquire(cmd *transport.Command) bool {
	return cmd.Name == "SET" || cmd.Script != nil && cmd.Script.Name() == "wait_acquire"
}
