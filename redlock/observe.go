package redlock

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/observe"
)

// Observing a client: WithObserver hands every acquisition, extension,
// release and loss of a lock, every master's answer and every change of a
// master's state to an observe.Observer (package observe holds it and the
// events), such as the OpenTelemetry observer of the nested module
// github.com/quorumlock/quorumlock/otel. The hooks sit where
// the outcome is decided: at the end of an acquisition (after its last
// attempt), of an extension and of a release, where a lock is marked
// lost, and where a master's command is answered. Without an observer and
// without a logger none of this runs: no event is built, nothing is
// allocated, and the hot path reads one nil field per hook.
//
// A master's state (up or failing) is kept when a logger or an observer
// is set: the first failure after success turns it failing (logged once,
// at Warn), later failures are counted and not logged (a reminder with the
// count at most once a minute), and the next answer turns it up again
// (logged at Info with the count) — an answer to a command sent after it
// turned failing: not a late answer to one queued behind the failure.

// WithObserver sends the client's events to o (see observe.Observer).
// The default, nil, sends none and costs nothing.
func WithObserver(o observe.Observer) Option { return func(c *config) { c.observer = o } }

// guarded is an Observer that recovers a panic of the one it wraps: a
// faulty observer must neither crash the client (OnMasterAnswer runs on a
// transport's goroutine, where nobody could recover it) nor unwind an
// acquisition after the masters granted it, stranding a lock its caller
// never got. The first panic is logged at Error (WithLogger); the later
// ones only counted.
type guarded struct {
	o      observe.Observer
	logger *slog.Logger
	panics *atomic.Int64
}

// guard wraps o (nil stays nil: no observer costs nothing).
func guard(o observe.Observer, logger *slog.Logger) observe.Observer {
	if o == nil {
		return nil
	}
	return guarded{o: o, logger: logger, panics: new(atomic.Int64)}
}

// recovered is deferred by each method of g.
func (g guarded) recovered(method string) {
	p := recover()
	if p == nil {
		return
	}
	if g.panics.Add(1) == 1 && g.logger != nil {
		g.logger.LogAttrs(context.Background(), slog.LevelError, "redlock: observer panicked",
			slog.String("method", method), slog.Any("panic", p),
			slog.String("note", "recovered; further panics of the observer are not logged"))
	}
}

func (g guarded) OnAcquire(ctx context.Context, e observe.AcquireEvent) {
	defer g.recovered("OnAcquire")
	g.o.OnAcquire(ctx, e)
}

func (g guarded) OnExtend(ctx context.Context, e observe.ExtendEvent) {
	defer g.recovered("OnExtend")
	g.o.OnExtend(ctx, e)
}

func (g guarded) OnRelease(ctx context.Context, e observe.ReleaseEvent) {
	defer g.recovered("OnRelease")
	g.o.OnRelease(ctx, e)
}

func (g guarded) OnLoss(ctx context.Context, e observe.LossEvent) {
	defer g.recovered("OnLoss")
	g.o.OnLoss(ctx, e)
}

func (g guarded) OnMasterAnswer(ctx context.Context, e observe.MasterAnswer) {
	defer g.recovered("OnMasterAnswer")
	g.o.OnMasterAnswer(ctx, e)
}

func (g guarded) OnMasterState(ctx context.Context, e observe.MasterStateEvent) {
	defer g.recovered("OnMasterState")
	g.o.OnMasterState(ctx, e)
}

// kindName names a lock's kind k (fencing from its options) for events.
func kindName(k kind, fencing bool) string {
	if mk, ok := k.(*metaKind); ok {
		k = mk.kind
	}
	switch k.(type) {
	case *reentrantKind:
		return observe.KindReentrant
	case readKind:
		return observe.KindRead
	case *writeKind:
		return observe.KindWrite
	case *multiKind:
		return observe.KindMulti
	case *fairness:
		if fencing {
			return observe.KindFairFence
		}
		return observe.KindFair
	}
	if fencing {
		return observe.KindFenced
	}
	return observe.KindPlain
}

// masterHealth is one master's state, for the logs and the observer.
type masterHealth struct {
	failing  atomic.Bool
	failures atomic.Int64 // since it turned failing
	changed  atomic.Int64 // when it last changed state (UnixNano); 0 never
	reminded atomic.Int64 // when the failures were last logged (UnixNano)
	// unconfirmed counts the releases and rollbacks given up on it since
	// it last answered (finish.go): the first is logged, the rest are
	// told with its recovery.
	unconfirmed atomic.Int64
}

// firstUnconfirmed counts a release or rollback given up on master m and
// reports whether to log it: the first since m last answered, or any when
// master states are not kept.
func (c *Client) firstUnconfirmed(m *master) bool {
	if c.health == nil {
		return true
	}
	return c.health[m.index].unconfirmed.Add(1) == 1
}

// failureReminder is how often a master that keeps failing is logged
// again, with the count of failures not logged since.
const failureReminder = time.Minute

// watching reports whether a logger or an observer is set: master states
// are kept and events built only then.
func (c *Client) watching() bool { return c.health != nil }

// masterFailed records master m's failure of op on key: logged when it
// turns m failing, counted otherwise.
func (c *Client) masterFailed(ctx context.Context, op opKind, key string, m *master, err error) {
	if c.health == nil {
		return
	}
	h := &c.health[m.index]
	now := time.Now()
	if !h.failing.Load() && h.failing.CompareAndSwap(false, true) {
		h.failures.Store(1)
		h.reminded.Store(now.UnixNano())
		var since time.Duration
		if prev := h.changed.Swap(now.UnixNano()); prev != 0 {
			since = time.Duration(now.UnixNano() - prev)
		}
		if c.logger != nil {
			c.logger.LogAttrs(ctx, slog.LevelWarn, "redlock: master failing",
				slog.String("op", op.String()), slog.String("key", key),
				slog.Int("master", m.index), slog.String("addr", m.addr), slog.Any("error", err),
				slog.String("note", "further failures of this master are counted, not logged, until it answers again"))
		}
		if c.obs != nil {
			c.obs.OnMasterState(ctx, observe.MasterStateEvent{Index: m.index, Addr: m.addr, State: observe.MasterFailing, Err: err, Since: since})
		}
		return
	}
	n := h.failures.Add(1)
	last := h.reminded.Load()
	if c.logger != nil && now.UnixNano()-last >= int64(failureReminder) && h.reminded.CompareAndSwap(last, now.UnixNano()) {
		c.logger.LogAttrs(ctx, slog.LevelWarn, "redlock: master still failing",
			slog.String("op", op.String()), slog.String("key", key),
			slog.Int("master", m.index), slog.String("addr", m.addr), slog.Any("error", err),
			slog.Int64("failures", n),
			slog.Duration("for", time.Duration(now.UnixNano()-h.changed.Load())))
	}
}

// masterAnswered records that master m answered a command sent at sent:
// a failing master turns up, unless the command was sent before it turned
// failing (a late answer to a command queued behind the failure says
// little about the master now, and would make its state flap).
func (c *Client) masterAnswered(ctx context.Context, m *master, sent time.Time) {
	if c.health == nil {
		return
	}
	h := &c.health[m.index]
	if !h.failing.Load() || sent.UnixNano() < h.changed.Load() || !h.failing.CompareAndSwap(true, false) {
		return
	}
	now := time.Now().UnixNano()
	n := h.failures.Swap(0)
	since := time.Duration(now - h.changed.Swap(now))
	if c.logger != nil {
		attrs := []slog.Attr{slog.Int("master", m.index), slog.String("addr", m.addr),
			slog.Int64("failures", n), slog.Duration("failing_for", since)}
		if u := h.unconfirmed.Swap(0); u > 0 {
			attrs = append(attrs, slog.Int64("unconfirmed", u))
		}
		c.logger.LogAttrs(ctx, slog.LevelInfo, "redlock: master answering again", attrs...)
	}
	if c.obs != nil {
		c.obs.OnMasterState(ctx, observe.MasterStateEvent{Index: m.index, Addr: m.addr, State: observe.MasterUp, Failures: n, Since: since})
	}
}

// answered records master i's answer to the round's command op (the
// round's own, or its rollback), when watching: the master's state, the
// observer's MasterAnswer and the round's record of answers (seen). err is
// the master's *NodeError or nil.
func (r *round) answered(i int, op opKind, v vote, err error) {
	c := r.c
	if c.health == nil {
		return
	}
	m := &c.masters[i]
	if err != nil && v != voteNo { // a refusal that says why is an answer
		c.masterFailed(r.ctx, op, r.key, m, err)
	} else {
		c.masterAnswered(r.ctx, m, r.started())
	}
	if c.obs == nil {
		return
	}
	now := time.Now()
	took := now.Sub(r.started())
	a := answerOf(v)
	if r.seen != nil && op == r.op {
		r.mu.Lock()
		r.seen[i] = observe.MasterResult{Index: i, Addr: m.addr, Answer: a, Latency: took, At: now, Err: err}
		r.mu.Unlock()
	}
	c.obs.OnMasterAnswer(r.ctx, observe.MasterAnswer{Index: i, Addr: m.addr, Op: op.String(), Answer: a, Latency: took, Err: err})
}

func answerOf(v vote) observe.Answer {
	switch v {
	case voteYes:
		return observe.AnswerOK
	case voteNo:
		return observe.AnswerRefused
	default:
		return observe.AnswerFailed
	}
}

// results returns the round's answers so far, by master (nil when not
// observing).
func (r *round) results() []observe.MasterResult {
	if r == nil || r.seen == nil {
		return nil
	}
	out := make([]observe.MasterResult, len(r.seen))
	r.mu.Lock()
	copy(out, r.seen)
	r.mu.Unlock()
	for i := range out {
		if out[i].Answer == "" {
			out[i] = observe.MasterResult{Index: i, Addr: r.c.masters[i].addr, Answer: observe.AnswerPending}
		}
	}
	return out
}

// started returns when the round started (wall clock).
func (r *round) started() time.Time {
	if r == nil {
		return time.Time{}
	}
	return r.deadline.Add(-r.wait)
}

// acquireOutcome classifies an acquisition's result.
func acquireOutcome(err error) observe.AcquireOutcome {
	if err == nil {
		return observe.AcquireAcquired
	}
	var qe *QuorumError
	if !asQuorumError(err, &qe) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return observe.AcquireCancelled
		}
		if errors.Is(err, ErrClosed) {
			return observe.AcquireClosed
		}
		return observe.AcquireFailedMasters
	}
	failed := 0
	if qe.Failed != nil {
		failed = len(qe.Failed.Errors)
	}
	spare := qe.Masters - qe.Quorum // how many may say no or fail
	switch {
	case qe.NoValidity:
		return observe.AcquireTooLate
	case failed > spare:
		if errors.Is(err, ErrClosed) {
			return observe.AcquireClosed
		}
		return observe.AcquireFailedMasters
	case len(qe.Refused) > 0 && len(qe.Refused)+failed > spare:
		return observe.AcquireContended
	case qe.ctxErr != nil:
		return observe.AcquireCancelled
	case len(qe.Refused) > 0:
		return observe.AcquireContended
	}
	return observe.AcquireFailedMasters
}

// extendOutcome classifies an extension's result.
func extendOutcome(err error) observe.ExtendOutcome {
	switch {
	case err == nil:
		return observe.ExtendExtended
	case errors.Is(err, ErrNotExtended):
		return observe.ExtendNotExtended
	case errors.Is(err, ErrLockLost):
		return observe.ExtendLost
	case errors.Is(err, ErrNotHeld):
		return observe.ExtendNotHeld
	}
	return observe.ExtendFailed
}

// releaseOutcome classifies a release's result.
func releaseOutcome(err error) observe.ReleaseOutcome {
	switch {
	case err == nil:
		return observe.ReleaseReleased
	case errors.Is(err, ErrNotHeld):
		return observe.ReleaseNotHeld
	case errors.Is(err, ErrNotReleased):
		return observe.ReleaseNotReleased
	}
	return observe.ReleaseFailed
}

// lossCause classifies the reason a lock was lost (not ErrReleased).
func lossCause(err error) observe.LossCause {
	switch {
	case errors.Is(err, ErrMaxHold):
		return observe.LossMaxHold
	case errors.Is(err, ErrClosed):
		return observe.LossClosed
	case errors.Is(err, ErrNotExtended):
		return observe.LossNotExtended
	}
	var qe *QuorumError
	if errors.As(err, &qe) && len(qe.Refused) > qe.Masters-qe.Quorum {
		return observe.LossNotHeld
	}
	return observe.LossExpired
}

// observeAcquire reports an acquisition's end (l nil when it failed; last
// the latest attempt's round, if any).
func (c *Client) observeAcquire(ctx context.Context, key string, kind string, start time.Time, attempts int, last *round, l *Lock, err error) {
	e := observe.AcquireEvent{
		Key: key, Kind: kind, Outcome: acquireOutcome(err), Attempts: attempts,
		Start: start, Wait: c.clock.Since(start), Masters: last.results(), Err: err,
		LastStart: last.started(), Quorum: c.quorum,
	}
	if err == nil && l != nil {
		e.ID = l.id
		e.Until, e.Validity = l.validity()
	}
	c.obs.OnAcquire(ctx, e)
}

// lost reports the loss of l, for the logger and the observer (not a
// release, which Release reports).
func (l *Lock) reportLoss(ctx context.Context, err error) {
	c := l.c
	if !c.watching() {
		return
	}
	cause := lossCause(err)
	held := c.clock.Since(l.acquired)
	if c.logger != nil {
		c.logger.LogAttrs(ctx, slog.LevelWarn, "redlock: lock lost",
			slog.String("key", l.key), slog.String("cause", string(cause)),
			slog.Duration("held", held), slog.Any("error", err))
	}
	if c.obs != nil {
		c.obs.OnLoss(ctx, observe.LossEvent{Key: l.key, Kind: l.kindName(), Cause: cause, Held: held, Err: err, ID: l.id})
	}
}

// kindName names the lock's kind, for events.
func (l *Lock) kindName() string {
	if l.eventKind != "" {
		return l.eventKind
	}
	return kindName(l.kind(), l.fence != 0)
}

// Waited returns how long the acquisition that returned the lock took,
// from the call to its result, its waits between attempts included (0
// for a Lock no acquisition returned).
func (l *Lock) Waited() time.Duration {
	if l == nil {
		return 0
	}
	return l.waited
}

// Attempts returns how many attempts the acquisition that returned the
// lock made (1 when the first one took it; 0 for a Lock no acquisition
// returned).
func (l *Lock) Attempts() int {
	if l == nil {
		return 0
	}
	return l.attempts
}

// Granted returns the masters that granted the lock in the attempt that
// took it, by their position in the list given to New (as NodeError.Index
// and QuorumError.Refused name them), in increasing order: at least a
// quorum of them. Masters that granted it after the attempt was decided
// are not among them. It is nil for a Lock no acquisition returned.
func (l *Lock) Granted() []int {
	if l == nil {
		return nil
	}
	var out []int
	for i, v := range l.votes {
		if v == voteYes {
			out = append(out, i)
		}
	}
	return out
}
