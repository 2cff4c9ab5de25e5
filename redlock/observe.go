package redlock

import (
	"context"
	"errors"
	"log/slog"
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
// allocated, and the hot path reads one nil field per hook. A master's
// state (up or failing) is kept by internal/health, which also guards the
// observer against its panics.

// WithObserver sends the client's events to o (see observe.Observer).
// The default, nil, sends none and costs nothing.
func WithObserver(o observe.Observer) Option { return func(c *config) { c.observer = o } }

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
		c.health.Failed(r.ctx, i, op.String(), r.key, err)
	} else {
		c.health.Answered(r.ctx, i, r.started())
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
	if c.health == nil { // neither a logger nor an observer
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
