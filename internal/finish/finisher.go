package finish

import (
	"container/heap"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/transport"
)

// minBackoff and maxBackoff bound the backoff between the tries of a
// release or rollback that a master missed.
const (
	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
)

// defaultLimit is how many retries may wait per client.
const defaultLimit = 1024

// TooManyRetries is why a retry is refused beyond the limit (Job.GaveUp):
// the client's own limit, not a master's silence.
const TooManyRetries = "too many outstanding retries"

// Host is the client a Finisher works for. Its methods are called
// without the finisher's locks, except where said.
type Host interface {
	// AddWorker counts one more goroutine or command in flight that the
	// client's Close waits for, and reports true; once the client is
	// closing it counts nothing and reports false. Called under the
	// finisher's mu as well: it may take the host's own lock
	// (Client.mu), never one of the finisher's.
	AddWorker() bool
	// WorkerDone ends one that AddWorker counted.
	WorkerDone()
	// Send hands cmd to master i's transport, which completes it
	// (cmd.To) once, on any goroutine, possibly before Send returns; a
	// host that no longer sends completes it itself. Called under the
	// finisher's gate, never under its mu.
	Send(i int, cmd *transport.Command)
	// Backoff returns the delay before try attempt+1: a random duration
	// in [d/2, d] where d = min(ceiling, floor×2^attempt).
	Backoff(floor, ceiling time.Duration, attempt int) time.Duration
}

// Job is one release or rollback of one round, as the finisher retries
// it on a master: it builds the command and reads its reply. A retry's
// sends follow one another (the next is built only after the previous
// one's reply was read), so a Job may keep what Decode needs from Fill.
type Job interface {
	// Round returns the finisher's state of the round the job belongs
	// to; the same one at every call.
	Round() *Round
	// NothingAt reports whether master i certainly holds nothing the job
	// would delete (the lock's token never reached it), as far as is
	// known now: the retry is dropped unsent and without a warning. It
	// is called without the finisher's locks, and may take the round's.
	NothingAt(i int) bool
	// Fill writes the command for master i into cmd; the finisher then
	// sets cmd.To and cmd.Deadline.
	Fill(i int, cmd *transport.Command)
	// Decode reads master i's outcome of the latest command Fill built.
	// err nil: the master answered, and the retry ends — unless again, a
	// rollback that must be sent once more (confirm: this send was that
	// once more). Else the retry is tried again after a backoff.
	Decode(i int, confirm bool, res any, err error) (again bool, _ error)
	// GaveUp reports that the retry on master i is given up (why) after
	// tries sends, the latest failing with err (nil if none was sent, or
	// the retry confirmed a rollback). Called without the finisher's
	// locks; not for retries dropped because the client closes or the
	// round was superseded.
	GaveUp(i, tries int, err error, why string)
}

// Config is what a Finisher is made with.
type Config struct {
	// Ordered holds one entry per master: whether its transport keeps
	// its commands in order (transport.Ordered). On one that does not, a
	// reentrant owner's next round waits for a retry still in flight
	// (Round.WaitAfter).
	Ordered []bool
	// Timeout is the client's per-master timeout: each send's deadline,
	// and part of a reentrant owner's round's end of retries (Newest).
	Timeout time.Duration
	// Closing is closed when the client closes: what is queued is then
	// dropped, and the finisher's goroutine ends.
	Closing <-chan struct{}
	// Logger, if not nil, is told how many retries closing dropped.
	Logger *slog.Logger
}

// Finisher holds a client's retries of releases and rollbacks that a
// master did not confirm. One goroutine, counted by Host.AddWorker, runs
// while any retry is queued. Call Init before any other method; a
// Finisher is safe for concurrent use, except Newest and Owners (see
// Newest), and must not be copied.
//
// Lock order: gate, then mu, then the host's lock (Client.mu: the
// finisher calls Host.AddWorker under mu); the host calls no method of
// the finisher while holding a lock of its own, except Newest and
// Owners, which take none of the finisher's. A transport's locks come
// after gate (Host.Send runs under it).
type Finisher struct {
	// Set by Init, read-only after.
	host    Host
	ordered []bool
	timeout time.Duration
	closing <-chan struct{}
	logger  *slog.Logger

	// gate orders a retry's send with the start of a later round of the
	// same reentrant owner (Supersede). Taken before mu, a transport's
	// lock (a mux's) or the host's lock (Client.mu), never while holding
	// one.
	gate sync.Mutex

	mu          sync.Mutex // guards the fields below, up to owners; taken before the host's lock (Client.mu)
	queue       queue      // by due time
	masters     []master
	outstanding int  // retries queued, held or in flight
	running     bool // the goroutine runs
	closed      bool
	wake        chan struct{} // size 1: the queue's head changed
	limit       int
	min, max    time.Duration

	// owners maps each reentrant owner's chain to its newest round,
	// until that round's retries could no longer run. Under the host's
	// lock (Client.mu), not mu: see Newest.
	owners  map[string]*Round
	sweepAt int

	// sent holds the retries sent and not yet completed (under mu), for
	// Close to complete them should a transport never do so
	// (Unanswered).
	sent map[*send]struct{}
}

// master is the finisher's state for one master.
type master struct {
	down     bool      // its latest retry got no answer: one at a time
	fails    int       // retries in a row that got no answer
	next     time.Time // while down, no retry before this (its backoff)
	inflight int       // retries sent, not yet ended
	held     []*entry  // due while it is down and one is in flight
}

// entry is one retry: job on master i.
type entry struct {
	job   Job
	round *Round // job.Round()
	i     int
	tries int       // sends so far
	due   time.Time // the next send
	until time.Time // no send after this
	err   error     // the latest failure
	// confirm: the rollback is sent once more after it found nothing to
	// delete (Confirm); set for that last send.
	confirm bool
}

// Init readies f for the masters of cfg, working for h.
func (f *Finisher) Init(h Host, cfg Config) {
	f.host = h
	f.ordered = cfg.Ordered
	f.timeout = cfg.Timeout
	f.closing = cfg.Closing
	f.logger = cfg.Logger
	f.wake = make(chan struct{}, 1)
	f.limit = defaultLimit
	f.min, f.max = minBackoff, maxBackoff
	f.masters = make([]master, len(cfg.Ordered))
}

// Outstanding reports how many retries are queued, held or in flight.
func (f *Finisher) Outstanding() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.outstanding
}

// SetBackoff sets the bounds of the backoff between a master's retries
// (20 ms and 1 s by default), from the next one drawn on.
func (f *Finisher) SetBackoff(floor, ceiling time.Duration) {
	f.mu.Lock()
	f.min, f.max = floor, ceiling
	f.mu.Unlock()
}

// SetLimit sets how many retries may be outstanding (1024 by default);
// beyond that, new ones are refused (TooManyRetries).
func (f *Finisher) SetLimit(n int) {
	f.mu.Lock()
	f.limit = n
	f.mu.Unlock()
}

// acts is what is left to do once Finisher.mu is released.
type acts struct {
	start, poke bool
	logs        []gaveUp
}

type gaveUp struct {
	e   *entry
	why string
}

func (a *acts) do(f *Finisher) {
	if a.start {
		go f.run()
	} else if a.poke {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
	for _, l := range a.logs {
		l.e.job.GaveUp(l.e.i, l.e.tries, l.e.err, l.why)
	}
}

// Retry queues a retry of j on master i, which failed with err without
// an answer: alone on that master, after a backoff. It ends, at the
// latest, ttl from now (the key has expired there by then), or at the end
// of retries of j's round (Newest). Nothing is queued for a round already
// superseded.
func (f *Finisher) Retry(j Job, i int, ttl time.Duration, err error) {
	f.add(j, i, ttl, err, false)
}

// Confirm queues j, a rollback that master i answered but that found
// nothing to delete, to be sent once more, 20 ms (the shortest backoff)
// from now; it ends as Retry's does.
func (f *Finisher) Confirm(j Job, i int, ttl time.Duration) {
	f.add(j, i, ttl, nil, true)
}

// add queues a retry of j on master i: after a failure (err), alone on
// that master after a backoff; or, to confirm a rollback (confirm),
// f.min from now.
func (f *Finisher) add(j Job, i int, ttl time.Duration, err error, confirm bool) {
	rf := j.Round()
	if rf.superseded.Load() {
		return
	}
	now := time.Now()
	until := now.Add(ttl)
	if !rf.until.IsZero() && rf.until.Before(until) {
		until = rf.until
	}
	e := &entry{job: j, round: rf, i: i, until: until, err: err, confirm: confirm}
	var a acts
	f.mu.Lock()
	if f.outstanding >= f.limit && !f.closed {
		a.logs = append(a.logs, gaveUp{e, TooManyRetries})
	} else {
		f.outstanding++
		due := now.Add(f.min)
		if !confirm {
			// The master just failed: its first retry goes alone.
			f.masters[i].down = true
			due = now.Add(f.host.Backoff(f.min, f.max, 0))
		}
		f.queueLocked(e, due, &a)
	}
	f.mu.Unlock()
	a.do(f)
}

// queueLocked queues e (counted in outstanding) to be sent at due, or drops
// it: superseded, the client closed, or due past its time.
func (f *Finisher) queueLocked(e *entry, due time.Time, a *acts) {
	why := ""
	switch {
	case e.round.superseded.Load() || f.closed:
		why = "-" // the owner's next round decides; Close logs its own
	case due.After(e.until):
		why = "no answer before the key's TTL"
	}
	if why == "" && !f.running {
		if f.host.AddWorker() {
			f.running, a.start = true, true
		} else {
			f.closed, why = true, "-"
		}
	}
	if why != "" {
		f.outstanding--
		if why != "-" {
			a.logs = append(a.logs, gaveUp{e, why})
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
// nothing to delete is sent once more (again: see Confirm).
func (f *Finisher) ended(e *entry, err error, dropped, again bool) {
	var a acts
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
		f.queueLocked(e, at.Add(f.min), &a)
	case err == nil:
		f.outstanding--
		m.down, m.fails = false, 0
	default:
		e.err = err
		m.next = at.Add(f.host.Backoff(f.min, f.max, m.fails))
		m.down = true
		m.fails++
		// The held ones compete with it for the next try, so that one
		// that always fails (an error reply for its key) cannot hold
		// the others back for long.
		at = m.next
		f.queueLocked(e, at, &a)
	}
	held := m.held
	m.held = nil
	for _, h := range held {
		f.queueLocked(h, at, &a)
	}
	f.mu.Unlock()
	a.do(f)
}

// run sends the retries as they fall due, until none is queued or the
// client closes.
func (f *Finisher) run() {
	defer f.host.WorkerDone()
	for {
		f.mu.Lock()
		now := time.Now()
		var due []*entry
		for len(f.queue) > 0 && !f.queue[0].due.After(now) {
			e := heap.Pop(&f.queue).(*entry)
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
			f.try(e)
		}
		if len(due) > 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-f.wake:
		case <-f.closing:
			t.Stop()
			f.close()
			return
		}
		t.Stop()
	}
}

// close drops what is queued or held: the client is closing.
func (f *Finisher) close() {
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
		if !e.confirm && !e.job.NothingAt(e.i) {
			n++
		}
	}
	if n > 0 && f.logger != nil {
		f.logger.LogAttrs(context.Background(), slog.LevelWarn,
			"redlock: client closed with releases that masters missed still to retry; those keys stay there until their TTL",
			slog.Int("retries", n))
	}
}

// try sends e once more, counted by Host.AddWorker.
func (f *Finisher) try(e *entry) {
	if !f.host.AddWorker() {
		f.mu.Lock()
		f.closed = true
		f.mu.Unlock()
		f.ended(e, nil, true, false)
		return
	}
	if e.job.NothingAt(e.i) {
		f.ended(e, nil, true, false)
		f.host.WorkerDone()
		return
	}
	e.tries++
	f.send(e)
}

// queue is a heap of retries by due time.
type queue []*entry

func (q queue) Len() int           { return len(q) }
func (q queue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q queue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)        { *q = append(*q, x.(*entry)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}
