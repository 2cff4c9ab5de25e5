package redlock

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/event"
	"github.com/quorumlock/quorumlock/internal/jitter"
)

// Finishing releases and rollbacks that a master did not confirm.
//
// A release, or the rollback of a failed attempt, that a master did not
// answer leaves the key there until its TTL — the caller's answer does not
// need that master, but the key blocks it for everyone. So the client
// sends such a command to that master again, in the background: a few
// times, with a backoff that grows to finishMax, until the master answers
// (yes or no: either way the key is no longer ours there), the key's TTL
// has passed since the master failed (it has expired by then), or the
// client closes. The caller's answer stays as it was.
//
// What "did not confirm" is, is the transport's to say: every command it
// completes with an error, and every release that never went out because
// the round before it on that master was still unanswered. Pipelined, a
// command waits on the master's one connection after its caller stopped
// waiting, and a late answer means it ran: only a command that failed for
// good — its connection broke (silence, a reply out of step, a second
// EOF), the redial failed, the queue was full, an error reply — fails.
// Pooled, every command that got no answer by its deadline fails (its
// connection is discarded).
//
// A compare-and-delete by token is idempotent, so a late copy is harmless
// — except for a reentrant owner, whose every hold uses the owner as its
// token: a retry of an old release that reached the master after the
// owner's next acquisition would delete the new hold. So every round of a
// reentrant owner supersedes the owner's previous rounds (see
// docs/design.md, "Finishing what a master missed"): their retries are
// dropped, and a retry is sent only under the gate that the next round
// passes before it sends anything, so a retry is either sent before that
// round (and reaches the master first: one connection, or chained) or not
// at all. Other holders' tokens are used by one attempt or one lock only,
// and their later rounds never touch them.
//
// A master whose latest retry failed gets one retry at a time, after a
// backoff of its own (the others wait for its outcome), so a master that
// is down or hung is not flooded with retries and dials; once it answers,
// the waiting ones go at once. At most finishLimit retries wait per
// client; beyond that, new ones are refused with a log line (the key then
// expires at its TTL there), so that a master that is gone for long
// cannot make the client hoard work.

// finishMin and finishMax bound the backoff between the tries of a
// release or rollback that a master missed.
const (
	finishMin = 20 * time.Millisecond
	finishMax = time.Second
)

// finishLimit is how many retries may wait per client.
const finishLimit = 1024

// tooManyRetries is why a retry is refused beyond finishLimit.
const tooManyRetries = "too many outstanding retries"

// finisher holds a client's retries of releases and rollbacks that a
// master did not confirm. One goroutine, tracked in Client.workers, runs
// while any retry is queued.
type finisher struct {
	// gate orders a retry's send with the start of a later round of the
	// same reentrant owner (supersede). Taken before mu, a mux's lock or
	// Client.mu, never while holding one.
	gate sync.Mutex

	mu          sync.Mutex // guards the fields below, up to owners; taken before Client.mu
	queue       finQueue   // by due time
	masters     []finMaster
	outstanding int  // retries queued, held or in flight
	running     bool // the goroutine runs
	closed      bool
	wake        chan struct{} // size 1: the queue's head changed
	limit       int
	min, max    time.Duration
	jit         *jitter.Rand // the client's

	// owners maps each reentrant owner's chain (chainID) to its newest
	// round, until that round's retries could no longer run. Under
	// Client.mu.
	owners  map[string]*round
	sweepAt int

	// sent holds the retries sent and not yet completed (under mu), for
	// Close to complete them should a transport never do so
	// (Client.abandon).
	sent map[*finReq]struct{}
}

// finMaster is the finisher's state for one master.
type finMaster struct {
	down     bool        // its latest retry got no answer: one at a time
	fails    int         // retries in a row that got no answer
	next     time.Time   // while down, no retry before this (its backoff)
	inflight int         // retries sent, not yet ended
	held     []*finEntry // due while it is down and one is in flight
}

// finEntry is one retry: op of round r on master i.
type finEntry struct {
	r     *round
	i     int
	op    opKind
	tries int       // sends so far
	due   time.Time // the next send
	until time.Time // no send after this
	err   error     // the latest failure
	// confirm: the rollback is sent once more after it found nothing to
	// delete (confirmLater); set for that last send.
	confirm bool
}

func (f *finisher) init(masters int, jit *jitter.Rand) {
	f.jit = jit
	f.wake = make(chan struct{}, 1)
	f.limit = finishLimit
	f.min, f.max = finishMin, finishMax
	f.masters = make([]finMaster, masters)
}

// finishes reports whether op of r is finished when a master misses it: a
// rollback, or a release that frees the key (not a reentrant owner's
// partial release, which only sets its count).
func finishes(op opKind, r *round) bool {
	return op == opRollback || (op == opRelease && !r.k.partial())
}

// finActs is what is left to do once finisher.mu is released.
type finActs struct {
	start, poke bool
	logs        []finLog
}

type finLog struct {
	e   *finEntry
	why string
}

func (a *finActs) do(c *Client) {
	f := &c.fin
	if a.start {
		go f.run(c)
	} else if a.poke {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
	for _, l := range a.logs {
		c.logUnfinished(l.e, l.why)
	}
}

// finishLater queues a retry of op of r on master i, which failed with
// err without an answer.
func (c *Client) finishLater(r *round, i int, op opKind, err error) {
	if op == opRollback && r.fin.unsentAt(i) || r.fin.nothingAt(i) {
		return // nothing to roll back or release there
	}
	c.fin.add(c, r, i, op, err, false)
}

// confirmLater sends master i's rollback of r once more, finishMin from
// now: the rollback found nothing to delete, yet the SET it undoes may
// still run there. That SET failed without an answer (a timeout, a
// connection the client gave up), so its bytes may wait in the master's
// buffers on a connection the client no longer reads — a master frozen
// (SIGSTOP) or busy — and run after a rollback that came in on another
// connection. A rollback sent after the master answered one has come
// through its event loop at least once since it ran again, and so after
// what it had already read (docs/design.md, "After a failed attempt").
func (c *Client) confirmLater(r *round, i int) {
	c.fin.add(c, r, i, opRollback, nil, true)
}

// add queues a retry of op (a release or a rollback) of r on master i:
// after a failure (err), alone on that master after a backoff; or, to
// confirm a rollback (confirm), finishMin from now.
func (f *finisher) add(c *Client, r *round, i int, op opKind, err error, confirm bool) {
	if r.fin.superseded.Load() {
		return
	}
	now := time.Now()
	until := now.Add(time.Duration(r.ttlMS) * time.Millisecond)
	if !r.fin.until.IsZero() && r.fin.until.Before(until) {
		until = r.fin.until
	}
	e := &finEntry{r: r, i: i, op: op, until: until, err: err, confirm: confirm}
	var a finActs
	f.mu.Lock()
	if f.outstanding >= f.limit && !f.closed {
		a.logs = append(a.logs, finLog{e, tooManyRetries})
	} else {
		f.outstanding++
		due := now.Add(f.min)
		if !confirm {
			// The master just failed: its first retry goes alone.
			f.masters[i].down = true
			due = now.Add(jitter.Backoff(f.jit, f.min, f.max, 0))
		}
		f.queueLocked(c, e, due, &a)
	}
	f.mu.Unlock()
	a.do(c)
}

// queueLocked queues e (counted in outstanding) to be sent at due, or drops
// it: superseded, the client closed, or due past its time.
func (f *finisher) queueLocked(c *Client, e *finEntry, due time.Time, a *finActs) {
	why := ""
	switch {
	case e.r.fin.superseded.Load() || f.closed:
		why = "-" // the owner's next round decides; Close logs its own
	case due.After(e.until):
		why = "no answer before the key's TTL"
	}
	if why == "" && !f.running {
		if c.addWorker() {
			f.running, a.start = true, true
		} else {
			f.closed, why = true, "-"
		}
	}
	if why != "" {
		f.outstanding--
		if why != "-" {
			a.logs = append(a.logs, finLog{e, why})
		}
		return
	}
	e.due = due
	heap.Push(&f.queue, e)
	if f.queue[0] == e {
		a.poke = true
	}
}

// ended ends one send of e to its master: answered (err nil), failed
// (err), or dropped before it was sent. An answered rollback that found
// nothing to delete is sent once more (again: see confirmLater).
func (f *finisher) ended(c *Client, e *finEntry, err error, dropped, again bool) {
	var a finActs
	f.mu.Lock()
	m := &f.masters[e.i]
	m.inflight--
	at := time.Now() // when the retries held for this master go
	switch {
	case dropped:
		f.outstanding--
	case err == nil && again:
		m.down, m.fails = false, 0
		e.confirm = true
		f.queueLocked(c, e, at.Add(f.min), &a)
	case err == nil:
		f.outstanding--
		m.down, m.fails = false, 0
	default:
		e.err = err
		m.next = at.Add(jitter.Backoff(f.jit, f.min, f.max, m.fails))
		m.down = true
		m.fails++
		// The held ones compete with it for the next try, so that one
		// that always fails (an error reply for its key) cannot hold
		// the others back for long.
		at = m.next
		f.queueLocked(c, e, at, &a)
	}
	held := m.held
	m.held = nil
	for _, h := range held {
		f.queueLocked(c, h, at, &a)
	}
	f.mu.Unlock()
	a.do(c)
}

// run sends the retries as they fall due, until none is queued or the
// client closes.
func (f *finisher) run(c *Client) {
	defer c.workers.Done()
	for {
		f.mu.Lock()
		now := time.Now()
		var due []*finEntry
		for len(f.queue) > 0 && !f.queue[0].due.After(now) {
			e := heap.Pop(&f.queue).(*finEntry)
			m := &f.masters[e.i]
			if m.down && m.inflight > 0 {
				m.held = append(m.held, e)
				continue
			}
			if m.down && now.Before(m.next) {
				e.due = m.next // the master's backoff, not this retry's
				heap.Push(&f.queue, e)
				continue
			}
			m.inflight++
			due = append(due, e)
		}
		if len(due) == 0 && len(f.queue) == 0 {
			// Held retries are queued again when the one in flight ends.
			f.running = false
			f.mu.Unlock()
			return
		}
		var wait time.Duration
		if len(f.queue) > 0 {
			wait = f.queue[0].due.Sub(now)
		}
		f.mu.Unlock()
		for _, e := range due {
			f.try(c, e)
		}
		if len(due) > 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-f.wake:
		case <-c.closing:
			t.Stop()
			f.close(c)
			return
		}
		t.Stop()
	}
}

// close drops what is queued or held: the client is closing.
func (f *finisher) close(c *Client) {
	f.mu.Lock()
	dropped := f.queue
	f.queue = nil
	for i := range f.masters {
		dropped = append(dropped, f.masters[i].held...)
		f.masters[i].held = nil
	}
	f.outstanding -= len(dropped)
	f.closed, f.running = true, false
	f.mu.Unlock()
	n := 0
	for _, e := range dropped {
		// Not a confirmation (a rollback answered, to be sent once more),
		// nor a release of a lock that never reached that master: nothing
		// stays there.
		if !e.confirm && !e.r.fin.nothingAt(e.i) {
			n++
		}
	}
	if n > 0 && c.logger != nil {
		c.logger.LogAttrs(context.Background(), slog.LevelWarn,
			"redlock: client closed with releases that masters missed still to retry; those keys stay there until their TTL",
			slog.Int("retries", n))
	}
}

// try sends e once more, tracked in Client.workers.
func (f *finisher) try(c *Client, e *finEntry) {
	if !c.addWorker() {
		f.mu.Lock()
		f.closed = true
		f.mu.Unlock()
		f.ended(c, e, nil, true, false)
		return
	}
	if e.r.fin.nothingAt(e.i) {
		f.ended(c, e, nil, true, false)
		c.workers.Done()
		return
	}
	e.tries++
	f.send(c, e)
}

// send sends e through the master's transport, bounded by a per-master
// timeout; the reply is handled wherever the transport completes it. On
// a transport that is not Ordered, a later round of a reentrant owner
// waits for it (roundFin.after).
func (f *finisher) send(c *Client, e *finEntry) {
	r := e.r
	w := new(wireCmd)
	r.wireInto(w, e.op, nil)
	q := &finReq{f: f, c: c, e: e, w: w}
	w.fill(&q.cmd, r)
	// As for the round's own command (wireCmd.fill), and never refused as
	// busy: what it undoes may still run.
	q.cmd.Undo, q.cmd.DropWhenDown = true, false
	q.cmd.To, q.cmd.Deadline = q, time.Now().Add(c.timeout)
	f.gate.Lock()
	if r.fin.superseded.Load() {
		f.gate.Unlock()
		f.ended(c, e, nil, true, false)
		c.workers.Done()
		return
	}
	m := &c.masters[e.i]
	if !m.ordered {
		if r.fin.busy == nil {
			r.fin.busy = make([]atomic.Pointer[event.Event], len(c.masters))
		}
		q.busy = new(event.Event)
		r.fin.busy[e.i].Store(q.busy)
	}
	f.mu.Lock()
	if f.sent == nil {
		f.sent = make(map[*finReq]struct{})
	}
	f.sent[q] = struct{}{}
	f.mu.Unlock()
	if c.abandoned.Load() {
		q.complete(nil, errAbandoned, SendInfo{})
	} else {
		m.t.Send(&q.cmd)
	}
	f.gate.Unlock()
}

// unanswered appends the retries sent and not yet completed to dst.
func (f *finisher) unanswered(dst []completer) []completer {
	f.mu.Lock()
	defer f.mu.Unlock()
	for q := range f.sent {
		dst = append(dst, q)
	}
	return dst
}

// finReq is a retry's command.
type finReq struct {
	cmd  Command
	f    *finisher
	c    *Client
	e    *finEntry
	w    *wireCmd
	busy *event.Event // the retry in flight, on a transport that is not Ordered
	// completed: a second completion is ignored (see leg.completed).
	completed atomic.Bool
}

func (q *finReq) complete(res any, err error, _ SendInfo) {
	if q.completed.Swap(true) {
		return
	}
	q.f.mu.Lock()
	delete(q.f.sent, q)
	q.f.mu.Unlock()
	e := q.e
	if q.busy != nil {
		e.r.fin.busy[e.i].CompareAndSwap(q.busy, nil)
		q.busy.Fire()
	}
	// Yes or no, the key is no longer ours there — except that a
	// rollback that found nothing may have overtaken the SET it undoes,
	// when that SET failed unanswered: it is confirmed once
	// (confirmLater). A SET that was answered has run, and cannot run
	// after this.
	v, err := e.r.decode(e.i, e.op, q.w.want, res, err)
	if v == voteNo {
		err = nil // a refusal that says why (ErrWrongKind) ends the retry too
	}
	again := err == nil && v == voteNo && e.op == opRollback && !e.confirm && e.r.setUnanswered(e.i)
	q.f.ended(q.c, e, err, false, again)
	q.c.workers.Done()
}

// logUnfinished reports a retry given up.
func (c *Client) logUnfinished(e *finEntry, why string) {
	if c.logger == nil || e.r.fin.nothingAt(e.i) {
		return // a release of a lock that never reached the master leaves nothing there
	}
	m := &c.masters[e.i]
	// A master that keeps missing them is told once, with a count when it
	// answers again; the client's own limit is told each time (rare).
	perMaster := why != tooManyRetries
	if perMaster && !c.firstUnconfirmed(m) {
		return
	}
	attrs := []slog.Attr{slog.String("op", e.op.String()), slog.String("key", e.r.key),
		slog.Int("master", m.index), slog.String("addr", m.addr), slog.String("reason", why), slog.Int("tries", e.tries)}
	if err := e.err; err != nil {
		var ne *NodeError
		if !errors.As(err, &ne) {
			err = c.nodeError(m, err)
		}
		attrs = append(attrs, slog.Any("error", err))
	}
	if perMaster && c.health != nil {
		attrs = append(attrs, slog.String("note", "further ones for this master are counted, not logged, until it answers again"))
	}
	c.logger.LogAttrs(context.Background(), slog.LevelWarn,
		"redlock: a master did not confirm a release or rollback; the key may stay there until its TTL", attrs...)
}

// finQueue is a heap of retries by due time.
type finQueue []*finEntry

func (q finQueue) Len() int           { return len(q) }
func (q finQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q finQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *finQueue) Push(x any)        { *q = append(*q, x.(*finEntry)) }
func (q *finQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}
