package redlock

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"
)

// Observing a client: WithObserver hands every acquisition, extension,
// release and loss of a lock, every master's answer and every change of a
// master's state to an Observer, such as the OpenTelemetry observer of the
// nested module github.com/quorumlock/quorumlock/otel. The hooks sit where
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

// Observer receives what a Client does, for metrics and traces. Its
// methods are called synchronously, possibly concurrently, on the
// goroutine that decided the outcome, whose work waits for them: they must
// be quick and must not block (OnExtend and OnRelease run with the lock's
// operations held, so they must not call its Extend or Release). Events
// and their slices are valid only during the call; ctx is the operation's
// caller's (context.Background() for a watchdog or a background retry). A
// panic in a method is recovered and logged (WithLogger). Embed NopObserver
// so that methods added to this interface later have a default.
type Observer interface {
	// OnAcquire reports the end of an acquisition (Acquire, TryAcquire,
	// Do, AcquireRead, AcquireWrite, AcquireMulti, and a Reentrant's
	// first hold), successful or not.
	OnAcquire(ctx context.Context, e AcquireEvent)
	// OnExtend reports the end of a call of Lock.Extend (also the
	// watchdog's, WithAutoExtend), and of a Reentrant taken again by its
	// owner, which renews the TTL as an extension does (Kind
	// "reentrant"; ExtendNotExtended when no quorum confirmed it in time,
	// Err then matching ErrNotAcquired).
	OnExtend(ctx context.Context, e ExtendEvent)
	// OnRelease reports the end of a call of Lock.Release that sent a
	// release (not a second Release of the same lock).
	OnRelease(ctx context.Context, e ReleaseEvent)
	// OnLoss reports a held lock lost (once per lock; not a release).
	OnLoss(ctx context.Context, e LossEvent)
	// OnMasterAnswer reports one master's answer to one command of a
	// round (or its failure), also answers that come after the round was
	// decided. It runs on the transport's goroutine: keep it short.
	OnMasterAnswer(ctx context.Context, e MasterAnswer)
	// OnMasterState reports a master turning failing or up again.
	OnMasterState(ctx context.Context, e MasterStateEvent)
}

// NopObserver is an Observer that does nothing: embed it in an Observer
// to implement only some of its methods.
type NopObserver struct{}

// OnAcquire does nothing.
func (NopObserver) OnAcquire(context.Context, AcquireEvent) {}

// OnExtend does nothing.
func (NopObserver) OnExtend(context.Context, ExtendEvent) {}

// OnRelease does nothing.
func (NopObserver) OnRelease(context.Context, ReleaseEvent) {}

// OnLoss does nothing.
func (NopObserver) OnLoss(context.Context, LossEvent) {}

// OnMasterAnswer does nothing.
func (NopObserver) OnMasterAnswer(context.Context, MasterAnswer) {}

// OnMasterState does nothing.
func (NopObserver) OnMasterState(context.Context, MasterStateEvent) {}

// WithObserver sends the client's events to o (see Observer). The
// default, nil, sends none and costs nothing.
func WithObserver(o Observer) Option { return func(c *config) { c.observer = o } }

// Lock kinds, as events name them.
const (
	KindPlain     = "plain"
	KindFair      = "fair"
	KindFenced    = "fenced"
	KindFairFence = "fair-fenced"
	KindReentrant = "reentrant"
	KindRead      = "read"
	KindWrite     = "write"
	KindMulti     = "multi"
)

// guarded is an Observer that recovers a panic of the one it wraps: a
// faulty observer must neither crash the client (OnMasterAnswer runs on a
// transport's goroutine, where nobody could recover it) nor unwind an
// acquisition after the masters granted it, stranding a lock its caller
// never got. The first panic is logged at Error (WithLogger); the later
// ones only counted.
type guarded struct {
	o      Observer
	logger *slog.Logger
	panics *atomic.Int64
}

// guard wraps o (nil stays nil: no observer costs nothing).
func guard(o Observer, logger *slog.Logger) Observer {
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

func (g guarded) OnAcquire(ctx context.Context, e AcquireEvent) {
	defer g.recovered("OnAcquire")
	g.o.OnAcquire(ctx, e)
}

func (g guarded) OnExtend(ctx context.Context, e ExtendEvent) {
	defer g.recovered("OnExtend")
	g.o.OnExtend(ctx, e)
}

func (g guarded) OnRelease(ctx context.Context, e ReleaseEvent) {
	defer g.recovered("OnRelease")
	g.o.OnRelease(ctx, e)
}

func (g guarded) OnLoss(ctx context.Context, e LossEvent) {
	defer g.recovered("OnLoss")
	g.o.OnLoss(ctx, e)
}

func (g guarded) OnMasterAnswer(ctx context.Context, e MasterAnswer) {
	defer g.recovered("OnMasterAnswer")
	g.o.OnMasterAnswer(ctx, e)
}

func (g guarded) OnMasterState(ctx context.Context, e MasterStateEvent) {
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
		return KindReentrant
	case readKind:
		return KindRead
	case *writeKind:
		return KindWrite
	case *multiKind:
		return KindMulti
	case *fairness:
		if fencing {
			return KindFairFence
		}
		return KindFair
	}
	if fencing {
		return KindFenced
	}
	return KindPlain
}

// AcquireOutcome is how an acquisition ended.
type AcquireOutcome string

const (
	// AcquireAcquired means the lock was taken.
	AcquireAcquired AcquireOutcome = "acquired"
	// AcquireContended means masters answered that another holder has it, so
	// no quorum was possible (until the wait bound).
	AcquireContended AcquireOutcome = "contended"
	// AcquireFailedMasters means so many masters failed or did not answer in
	// time that no quorum was possible.
	AcquireFailedMasters AcquireOutcome = "failed_masters"
	// AcquireTooLate means a quorum granted it, but so late that no validity
	// was left (it was rolled back).
	AcquireTooLate AcquireOutcome = "too_late"
	// AcquireCancelled means the caller's ctx ended before the answers decided.
	AcquireCancelled AcquireOutcome = "cancelled"
	// AcquireClosed means the client was closed.
	AcquireClosed AcquireOutcome = "closed"
)

// Answer is one master's answer in a round.
type Answer string

const (
	// AnswerOK is a grant, an extension or a release.
	AnswerOK Answer = "ok"
	// AnswerRefused is a refusal: held by another holder (an acquisition), or not
	// held by this token (extension, release).
	AnswerRefused Answer = "refused"
	// AnswerFailed is an error, or no answer within the per-master timeout.
	AnswerFailed Answer = "failed"
	// AnswerPending means no answer yet when the event was built, just after
	// the round was decided (the quorum was reached, or made impossible,
	// without it).
	AnswerPending Answer = "pending"
	// AnswerNotAsked means the master was not asked. A waiter woken by a
	// release asks one master first (the round's pilot) and the others
	// only once it granted; when it did not, they are not asked.
	AnswerNotAsked Answer = "not asked"
)

// MasterResult is one master's answer in the round an event reports.
type MasterResult struct {
	Index   int           // the master's position in the list given to New
	Addr    string        // its address, never with credentials
	Answer  Answer        // AnswerPending when it had not answered yet
	Latency time.Duration // from the round's start to the answer (0 when pending or not asked)
	At      time.Time     // when it answered (the zero time when pending or not asked)
	Err     error         // the *NodeError of a failed master
}

// AcquireEvent is an acquisition's end.
type AcquireEvent struct {
	Key      string
	Kind     string // KindPlain, KindFair, ...
	Outcome  AcquireOutcome
	Attempts int           // attempts made (1 for TryAcquire)
	Start    time.Time     // when the call started, on the client's clock
	Wait     time.Duration // from the call to its result
	Masters  []MasterResult
	Err      error // nil when acquired
	// LastStart is when the last attempt's round started (wall clock),
	// the time the Masters' latencies count from.
	LastStart time.Time
	Quorum    int
	// ID names the lock acquired in the events of its extensions, release
	// and loss: a number unique among the locks of the process (0 when
	// none was acquired).
	ID uint64
	// Until is the end of the lock's validity, as Lock.Until returns it
	// (the zero time when none was acquired), and Validity the validity
	// left when the event was built, on the client's clock: an observer
	// counting the locks whose validity has not ended adds Validity to
	// its own clock's now, which a lock that is never released or
	// extended (its holder stopped) reaches without any further event.
	Until    time.Time
	Validity time.Duration
}

// ExtendOutcome is how an extension ended.
type ExtendOutcome string

// The ways an extension ends.
const (
	ExtendExtended    ExtendOutcome = "extended"     // a quorum extended it in time
	ExtendNotExtended ExtendOutcome = "not_extended" // too few answered; still valid (ErrNotExtended)
	ExtendLost        ExtendOutcome = "lost"         // lost (ErrLockLost)
	ExtendNotHeld     ExtendOutcome = "not_held"     // released meanwhile (ErrNotHeld)
	ExtendFailed      ExtendOutcome = "failed"       // the client was closed, or ctx invalid
)

// ExtendEvent is an extension's end.
type ExtendEvent struct {
	Key      string
	Kind     string
	Outcome  ExtendOutcome
	Start    time.Time // on the client's clock
	Duration time.Duration
	TTL      time.Duration // the requested TTL
	Masters  []MasterResult
	Err      error
	Quorum   int
	// ID is the lock's, as AcquireEvent.ID.
	ID uint64
	// Until is the end of the lock's validity after the extension, as
	// Lock.Until returns it, and Validity the validity left then (≤ 0
	// when the lock was lost or released): later when it was extended,
	// possibly earlier when it was not (ExtendNotExtended; see
	// Lock.Extend).
	Until    time.Time
	Validity time.Duration
}

// ReleaseOutcome is how a release ended.
type ReleaseOutcome string

// The ways a release ends.
const (
	ReleaseReleased    ReleaseOutcome = "released"     // a quorum is known free of its token (deleted, or never held there)
	ReleaseNotHeld     ReleaseOutcome = "not_held"     // no longer held: too many masters without it, or validity over (ErrNotHeld)
	ReleaseNotReleased ReleaseOutcome = "not_released" // too few answered to tell (ErrNotReleased)
	ReleaseFailed      ReleaseOutcome = "failed"       // nothing was sent (the client was closed)
)

// ReleaseEvent is a release's end.
type ReleaseEvent struct {
	Key      string
	Kind     string
	Outcome  ReleaseOutcome
	Start    time.Time     // on the client's clock
	Duration time.Duration // of the release round
	// Held is how long the lock was held: from the start of its
	// acquisition's successful attempt to this release.
	Held time.Duration
	// WasLost: the lock had been lost before (OnLoss reported it), so
	// this release did not end a held lock.
	WasLost bool
	Masters []MasterResult
	Err     error
	Quorum  int
	// ID is the lock's, as AcquireEvent.ID.
	ID uint64
}

// LossCause says why a lock was lost.
type LossCause string

const (
	// LossExpired means its validity ran out (not extended in time).
	LossExpired LossCause = "expired"
	// LossNotHeld means an extension found too many masters no longer holding
	// its token.
	LossNotHeld LossCause = "not_held"
	// LossNotExtended means the watchdog's extensions reached no quorum, retried
	// and gave up before the validity ran out.
	LossNotExtended LossCause = "not_extended"
	// LossMaxHold means it was held for its maximum hold time (WithMaxHold).
	LossMaxHold LossCause = "max_hold"
	// LossClosed means its client was closed.
	LossClosed LossCause = "closed"
)

// LossEvent is a held lock lost.
type LossEvent struct {
	Key   string
	Kind  string
	Cause LossCause
	Held  time.Duration // from its acquisition to the loss
	Err   error         // what Lock.Err returns
	ID    uint64        // the lock's, as AcquireEvent.ID
}

// MasterAnswer is one master's answer to one command.
type MasterAnswer struct {
	Index   int
	Addr    string
	Op      string // "acquire", "extend", "release", "rollback", "leave queue", "commit fence"
	Answer  Answer
	Latency time.Duration // from the round's start
	Err     error         // the *NodeError of a failure
}

// MasterHealth is whether a master answers.
type MasterHealth string

// A master's states.
const (
	MasterUp      MasterHealth = "up"      // it answers (refusals count as answers)
	MasterFailing MasterHealth = "failing" // its last command failed
)

// MasterStateEvent is a master's change of state.
type MasterStateEvent struct {
	Index int
	Addr  string
	State MasterHealth
	// Err is the failure that turned it failing (nil when up).
	Err error
	// Failures is, when it turns up, how many commands failed while it
	// was failing (the first one included).
	Failures int64
	// Since is how long it was in the previous state (0 for its first
	// failure after the client started).
	Since time.Duration
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
			c.obs.OnMasterState(ctx, MasterStateEvent{Index: m.index, Addr: m.addr, State: MasterFailing, Err: err, Since: since})
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
		c.obs.OnMasterState(ctx, MasterStateEvent{Index: m.index, Addr: m.addr, State: MasterUp, Failures: n, Since: since})
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
		r.seen[i] = MasterResult{Index: i, Addr: m.addr, Answer: a, Latency: took, At: now, Err: err}
		r.mu.Unlock()
	}
	c.obs.OnMasterAnswer(r.ctx, MasterAnswer{Index: i, Addr: m.addr, Op: op.String(), Answer: a, Latency: took, Err: err})
}

func answerOf(v vote) Answer {
	switch v {
	case voteYes:
		return AnswerOK
	case voteNo:
		return AnswerRefused
	default:
		return AnswerFailed
	}
}

// results returns the round's answers so far, by master (nil when not
// observing).
func (r *round) results() []MasterResult {
	if r == nil || r.seen == nil {
		return nil
	}
	out := make([]MasterResult, len(r.seen))
	r.mu.Lock()
	copy(out, r.seen)
	r.mu.Unlock()
	for i := range out {
		if out[i].Answer == "" {
			out[i] = MasterResult{Index: i, Addr: r.c.masters[i].addr, Answer: AnswerPending}
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
func acquireOutcome(err error) AcquireOutcome {
	if err == nil {
		return AcquireAcquired
	}
	var qe *QuorumError
	if !asQuorumError(err, &qe) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return AcquireCancelled
		}
		if errors.Is(err, ErrClosed) {
			return AcquireClosed
		}
		return AcquireFailedMasters
	}
	failed := 0
	if qe.Failed != nil {
		failed = len(qe.Failed.Errors)
	}
	spare := qe.Masters - qe.Quorum // how many may say no or fail
	switch {
	case qe.NoValidity:
		return AcquireTooLate
	case failed > spare:
		if errors.Is(err, ErrClosed) {
			return AcquireClosed
		}
		return AcquireFailedMasters
	case len(qe.Refused) > 0 && len(qe.Refused)+failed > spare:
		return AcquireContended
	case qe.ctxErr != nil:
		return AcquireCancelled
	case len(qe.Refused) > 0:
		return AcquireContended
	}
	return AcquireFailedMasters
}

// extendOutcome classifies an extension's result.
func extendOutcome(err error) ExtendOutcome {
	switch {
	case err == nil:
		return ExtendExtended
	case errors.Is(err, ErrNotExtended):
		return ExtendNotExtended
	case errors.Is(err, ErrLockLost):
		return ExtendLost
	case errors.Is(err, ErrNotHeld):
		return ExtendNotHeld
	}
	return ExtendFailed
}

// releaseOutcome classifies a release's result.
func releaseOutcome(err error) ReleaseOutcome {
	switch {
	case err == nil:
		return ReleaseReleased
	case errors.Is(err, ErrNotHeld):
		return ReleaseNotHeld
	case errors.Is(err, ErrNotReleased):
		return ReleaseNotReleased
	}
	return ReleaseFailed
}

// lossCause classifies the reason a lock was lost (not ErrReleased).
func lossCause(err error) LossCause {
	switch {
	case errors.Is(err, ErrMaxHold):
		return LossMaxHold
	case errors.Is(err, ErrClosed):
		return LossClosed
	case errors.Is(err, ErrNotExtended):
		return LossNotExtended
	}
	var qe *QuorumError
	if errors.As(err, &qe) && len(qe.Refused) > qe.Masters-qe.Quorum {
		return LossNotHeld
	}
	return LossExpired
}

// observeAcquire reports an acquisition's end (l nil when it failed; last
// the latest attempt's round, if any).
func (c *Client) observeAcquire(ctx context.Context, key string, kind string, start time.Time, attempts int, last *round, l *Lock, err error) {
	e := AcquireEvent{
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
		c.obs.OnLoss(ctx, LossEvent{Key: l.key, Kind: l.kindName(), Cause: cause, Held: held, Err: err, ID: l.id})
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
