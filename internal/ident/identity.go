package ident

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/transport"
)

// identifyRetry spaces the probes of a master that did not answer.
const identifyRetry = time.Second

// reprobeGranted spaces the probes of a master that did not answer its
// last probe but granted since (ReprobeGranted): it answers, so it is
// asked again sooner than identifyRetry.
const reprobeGranted = 100 * time.Millisecond

// ProbeGrace is how long past its deadline the probe waits for a
// transport to complete a command (a pipelined one may deliver a reply
// late); an answer later than that is not waited for, though it is
// recorded when it comes.
const ProbeGrace = 100 * time.Millisecond

// Host is what an Identity asks of its Client while it probes.
type Host interface {
	// AddWorker counts one more goroutine that the Client's Close waits
	// for, unless the Client is closed, and reports whether it did. It
	// is called with the Identity's mutex held, and may take the
	// Client's own mutex.
	AddWorker() bool
	// WorkerDone ends a goroutine that AddWorker counted.
	WorkerDone()
	// Send hands cmd to master i's transport (transport.Transport.Send).
	// It is never called with the Identity's mutex held: a transport may
	// complete cmd within Send, and the completion takes that mutex.
	Send(i int, cmd *transport.Command)
	// NoteAnswer records that master i answered a command sent at sent,
	// read at now: the probe's answer, read late too, is a round trip
	// for the Client's adaptive bound, the first a Client sees.
	NoteAnswer(i int, sent, now time.Time)
}

// Config is what an Identity needs of its Client that does not change.
type Config struct {
	// Addrs are the masters' addresses, by index: how many masters there
	// are, and how the duplicate-master error names them.
	Addrs []string
	// Timeout is the per-master timeout: each INFO's deadline, and how
	// long past it a transport may still complete it (Command.Grace).
	Timeout time.Duration
	// Closing is closed when the Client closes: a probe stops waiting for
	// its answers then (Stopped), and Identified returns.
	Closing <-chan struct{}
	// Stalls is the Client's stall detector, not nil: the probe beats its
	// Rounds while it waits for its answers, as a round does.
	Stalls *stall.Stalls
	// Invalid is the sentinel the duplicate-master error wraps (the
	// Client's ErrInvalid), so that errors.Is matches it.
	Invalid error
}

// Identity is what a Client learned of its masters' run_ids, and the
// probes that learn them. Its zero value knows nothing; Init readies it,
// once, before any other method. It is safe for concurrent use and must
// not be copied.
type Identity struct {
	host Host
	cfg  Config

	settled atomic.Bool              // every master identified or known unidentifiable
	retryAt atomic.Int64             // unix ns before which no master is due for a probe
	dup     atomic.Pointer[dupError] // two masters are one server
	stopped atomic.Bool              // Close stopped a probe, or a round waiting for one
	all     atomic.Pointer[[]string] // every master's run_id, once all are known (Known)

	// mu guards the fields below. Lock order: the Client's waker takes
	// mu under its own mutex (it works out a key's pilot from Known), so
	// mu comes after the waker's and is never held while that is taken;
	// with mu held, the probe takes the Client's mutex (Host.AddWorker),
	// which comes after mu. Nothing is sent with mu held (Host.Send).
	mu      sync.Mutex
	first   chan struct{} // closed when the first probe ended; nil until it started
	ids     []string      // a master's run_id, "" while unknown
	final   []bool        // identified, or cannot be
	tried   []time.Time   // the last probe's start
	probing []bool        // a probe of the master runs
	asking  []int         // INFO commands sent to the master and not completed yet
	news    chan struct{} // closed, and replaced, at each completion of an INFO
}

// Init readies id for the masters of cfg, probed through h. A Client of
// one master has nothing to tell apart: it is settled from the start,
// sends no probe, and its grants count from the first round (Gate
// returns nil).
func (id *Identity) Init(h Host, cfg Config) {
	id.host, id.cfg = h, cfg
	if len(cfg.Addrs) == 1 {
		id.settled.Store(true)
	}
}

// Known returns every master's run_id, or nil while one is unknown (or
// cannot be known). The caller must not modify it. It takes id's mutex
// until every run_id is known; the Client's waker calls it under its own
// mutex (see Identity.mu).
func (id *Identity) Known() []string {
	if p := id.all.Load(); p != nil {
		return *p
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if len(id.ids) == 0 || slices.Contains(id.ids, "") {
		return nil
	}
	ids := slices.Clone(id.ids)
	id.all.Store(&ids)
	return ids
}

// dupError is two masters found to be one server.
type dupError struct{ err error }

// Identify is the first-contact check of every call that talks to the
// masters: it returns the duplicate-master error once one is known,
// starts the probe of every master the first time, and starts background
// probes of masters not yet identified. It never waits: the rounds count
// only identified masters (Gate).
func (id *Identity) Identify() error {
	if d := id.dup.Load(); d != nil {
		return d.err
	}
	if id.settled.Load() || time.Now().UnixNano() < id.retryAt.Load() {
		return nil // nothing to ask, or nothing due: no lock on the hot path
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.first == nil {
		n := len(id.cfg.Addrs)
		id.ids, id.final, id.tried, id.probing = make([]string, n), make([]bool, n), make([]time.Time, n), make([]bool, n)
		id.asking, id.news = make([]int, n), make(chan struct{})
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		first := make(chan struct{})
		if id.probe(all, func() { close(first) }) {
			id.first = first
		}
		return nil // not started: closed, the call fails with ErrClosed
	}
	select {
	case <-id.first:
		var due []int
		for i := range id.cfg.Addrs {
			if !id.final[i] && !id.probing[i] && time.Since(id.tried[i]) >= identifyRetry {
				due = append(due, i)
			}
		}
		if len(due) > 0 {
			id.probe(due, nil)
		}
		id.retryAt.Store(time.Now().Add(identifyRetry).UnixNano())
	default: // the first probe runs
	}
	return nil
}

// Identified waits until the first probe has ended, or ctx ends, or the
// Client closes, and returns the duplicate-master error if one is known
// then: for a call that counts no grants (Inspect) but refuses one
// server twice as the others do.
func (id *Identity) Identified(ctx context.Context) error {
	if id.settled.Load() && id.dup.Load() == nil {
		return nil
	}
	id.mu.Lock()
	first := id.first
	id.mu.Unlock()
	if first != nil {
		select {
		case <-first:
		case <-ctx.Done():
		case <-id.cfg.Closing:
		}
	}
	if d := id.dup.Load(); d != nil {
		return d.err
	}
	return nil
}

// ReprobeGranted asks again, in the background, the masters that granted
// (granted, by master) but are not identified, unless one is being asked
// or was less than reprobeGranted ago: their grants count once they are
// identified, and a master that grants answers. Nothing is asked while
// the first probe runs.
func (id *Identity) ReprobeGranted(granted []bool) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.first == nil {
		return
	}
	select {
	case <-id.first:
	default:
		return
	}
	var due []int
	for i, g := range granted {
		if g && !id.final[i] && !id.probing[i] && time.Since(id.tried[i]) >= reprobeGranted {
			due = append(due, i)
		}
	}
	if len(due) > 0 {
		id.probe(due, nil)
	}
}

// Dup returns the duplicate-master error once two masters were found to
// be one server, or nil: it wraps Config.Invalid and names both.
func (id *Identity) Dup() error {
	if d := id.dup.Load(); d != nil {
		return d.err
	}
	return nil
}

// MarkStopped records that Close stopped a round waiting for a probe:
// nothing more is identified for that round, which fails as closed
// (Stopped).
func (id *Identity) MarkStopped() { id.stopped.Store(true) }

// Stopped reports whether Close stopped a probe, or a round waiting for
// one (MarkStopped).
func (id *Identity) Stopped() bool { return id.stopped.Load() }

// Settled reports whether every master is identified or known
// unidentifiable: no probe is due any more.
func (id *Identity) Settled() bool { return id.settled.Load() }

// First returns a channel closed when the first probe ended, or nil while
// it has not started (for tests that wait for it).
func (id *Identity) First() <-chan struct{} {
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.first
}

// Tried returns when the latest probe of master i started, or the zero
// time before any probe started (for tests).
func (id *Identity) Tried(i int) time.Time {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.tried == nil {
		return time.Time{}
	}
	return id.tried[i]
}

// IDs returns a copy of each master's run_id as known now, "" while
// unknown (for tests).
func (id *Identity) IDs() []string {
	id.mu.Lock()
	defer id.mu.Unlock()
	return slices.Clone(id.ids)
}

// Final returns a copy of, by master, whether it is identified or known
// unidentifiable (for tests).
func (id *Identity) Final() []bool {
	id.mu.Lock()
	defer id.mu.Unlock()
	return slices.Clone(id.final)
}
