// Package health keeps each master's state (up or failing) for a
// Client's logger and observer, and guards the observer against its own
// panics.
//
// A master's state is kept when a logger or an observer is set: the
// first failure after success turns it failing (logged once, at Warn),
// later failures are counted and not logged (a reminder with the count at
// most once a minute), and the next answer turns it up again (logged at
// Info with the count) — an answer to a command sent after it turned
// failing: not a late answer to one queued behind the failure.
//
// It knows masters by their index and address only: which answer is a
// failure, and the events of acquisitions and releases, stay in the core.
// It takes no lock (each state is a set of atomics) and imports only
// package observe.
package health

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/observe"
)

// Reminder is how often a master that keeps failing is logged again, with
// the count of failures not logged since.
const Reminder = time.Minute

// Masters is the state of each of a Client's masters. Its methods are
// safe for concurrent use. A nil *Masters keeps nothing: the Client has
// neither logger nor observer, and Failed and Answered do nothing.
type Masters struct {
	addrs  []string
	logger *slog.Logger
	obs    observe.Observer
	m      []master
}

// master is one master's state, for the logs and the observer.
type master struct {
	failing  atomic.Bool
	failures atomic.Int64 // since it turned failing
	changed  atomic.Int64 // when it last changed state (UnixNano); 0 never
	reminded atomic.Int64 // when the failures were last logged (UnixNano)
	// unconfirmed counts the releases and rollbacks given up on it since
	// it last answered (the core's finisher): the first is logged, the
	// rest are told with its recovery.
	unconfirmed atomic.Int64
}

// New returns the states of the masters at addrs (by index, addresses
// without credentials), all up, told to logger and obs; either may be
// nil. addrs is read, never changed.
func New(addrs []string, logger *slog.Logger, obs observe.Observer) *Masters {
	return &Masters{addrs: addrs, logger: logger, obs: obs, m: make([]master, len(addrs))}
}

// FirstUnconfirmed counts a release or rollback given up on master i and
// reports whether to log it: the first since i last answered, or any when
// master states are not kept (h nil).
func (h *Masters) FirstUnconfirmed(i int) bool {
	if h == nil {
		return true
	}
	return h.m[i].unconfirmed.Add(1) == 1
}

// Failed records master i's failure of op on key: logged when it turns i
// failing (and told to the observer), counted otherwise, with a reminder
// at most once per Reminder.
func (h *Masters) Failed(ctx context.Context, i int, op, key string, err error) {
	if h == nil {
		return
	}
	s, addr := &h.m[i], h.addrs[i]
	now := time.Now()
	if !s.failing.Load() && s.failing.CompareAndSwap(false, true) {
		s.failures.Store(1)
		s.reminded.Store(now.UnixNano())
		var since time.Duration
		if prev := s.changed.Swap(now.UnixNano()); prev != 0 {
			since = time.Duration(now.UnixNano() - prev)
		}
		if h.logger != nil {
			h.logger.LogAttrs(ctx, slog.LevelWarn, "redlock: master failing",
				slog.String("op", op), slog.String("key", key),
				slog.Int("master", i), slog.String("addr", addr), slog.Any("error", err),
				slog.String("note", "further failures of this master are counted, not logged, until it answers again"))
		}
		if h.obs != nil {
			h.obs.OnMasterState(ctx, observe.MasterStateEvent{Index: i, Addr: addr, State: observe.MasterFailing, Err: err, Since: since})
		}
		return
	}
	n := s.failures.Add(1)
	last := s.reminded.Load()
	if h.logger != nil && now.UnixNano()-last >= int64(Reminder) && s.reminded.CompareAndSwap(last, now.UnixNano()) {
		h.logger.LogAttrs(ctx, slog.LevelWarn, "redlock: master still failing",
			slog.String("op", op), slog.String("key", key),
			slog.Int("master", i), slog.String("addr", addr), slog.Any("error", err),
			slog.Int64("failures", n),
			slog.Duration("for", time.Duration(now.UnixNano()-s.changed.Load())))
	}
}

// Answered records that master i answered a command sent at sent: a
// failing master turns up (logged, and told to the observer), unless the
// command was sent before it turned failing (a late answer to a command
// queued behind the failure says little about the master now, and would
// make its state flap).
func (h *Masters) Answered(ctx context.Context, i int, sent time.Time) {
	if h == nil {
		return
	}
	s, addr := &h.m[i], h.addrs[i]
	if !s.failing.Load() || sent.UnixNano() < s.changed.Load() || !s.failing.CompareAndSwap(true, false) {
		return
	}
	now := time.Now().UnixNano()
	n := s.failures.Swap(0)
	since := time.Duration(now - s.changed.Swap(now))
	if h.logger != nil {
		attrs := []slog.Attr{slog.Int("master", i), slog.String("addr", addr),
			slog.Int64("failures", n), slog.Duration("failing_for", since)}
		if u := s.unconfirmed.Swap(0); u > 0 {
			attrs = append(attrs, slog.Int64("unconfirmed", u))
		}
		h.logger.LogAttrs(ctx, slog.LevelInfo, "redlock: master answering again", attrs...)
	}
	if h.obs != nil {
		h.obs.OnMasterState(ctx, observe.MasterStateEvent{Index: i, Addr: addr, State: observe.MasterUp, Failures: n, Since: since})
	}
}
