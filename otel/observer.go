package otel

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	otelapi "go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/quorumlock/quorumlock/observe"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/quorumlock/quorumlock/otel"

// Attribute keys.
const (
	KeyLockKey        = attribute.Key("quorumlock.lock.key")
	KeyLockKind       = attribute.Key("quorumlock.lock.kind")
	KeyAcquireOutcome = attribute.Key("quorumlock.acquire.outcome")
	KeyExtendOutcome  = attribute.Key("quorumlock.extend.outcome")
	KeyReleaseOutcome = attribute.Key("quorumlock.release.outcome")
	KeyLossCause      = attribute.Key("quorumlock.loss.cause")
	KeyAttempts       = attribute.Key("quorumlock.acquire.attempts")
	KeyQuorum         = attribute.Key("quorumlock.quorum")
	KeyHeld           = attribute.Key("quorumlock.lock.held")
	KeyMasterIndex    = attribute.Key("quorumlock.master.index")
	KeyMasterAnswer   = attribute.Key("quorumlock.master.answer")
	KeyMasterLatency  = attribute.Key("quorumlock.master.duration")
	KeyMasterState    = attribute.Key("quorumlock.master.state")
	KeyOperation      = attribute.Key("quorumlock.operation")
	KeyServerAddress  = attribute.Key("server.address")
	KeyServerPort     = attribute.Key("server.port")
	KeyErrorType      = attribute.Key("error.type")
)

// Option configures New.
type Option func(*config)

type config struct {
	mp        metric.MeterProvider
	tp        trace.TracerProvider
	keyAttr   func(string) string
	maxActive int
}

// WithMeterProvider sets where metrics go. The default is the global
// provider (go.opentelemetry.io/otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider sets where spans go. The default is the global
// provider (go.opentelemetry.io/otel.GetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithKeyAttribute adds the attribute quorumlock.lock.key to the lock
// metrics (acquisitions, attempts, active locks, hold time, extensions,
// releases, losses), with the value f returns for a lock's key; "" leaves
// it out for that key. Each distinct value is a series of its own: return
// a bounded set, such as the key itself for a handful of well-known keys
// and "" (or a prefix) for per-entity keys like order:12345. Spans always
// carry the key. By default the metrics carry no key.
func WithKeyAttribute(f func(key string) string) Option { return func(c *config) { c.keyAttr = f } }

// Observer is an observe.Observer that records metrics and spans. Give it
// to redlock.WithObserver; one Observer may serve several clients. It is
// safe for concurrent use.
type Observer struct {
	observe.NopObserver
	tracer  trace.Tracer
	keyAttr func(string) string

	acquireDur metric.Float64Histogram
	attempts   metric.Int64Histogram
	activeObs  metric.Int64ObservableUpDownCounter
	active     *activeLocks
	hold       metric.Float64Histogram
	extensions metric.Int64Counter
	releases   metric.Int64Counter
	losses     metric.Int64Counter
	masterDur  metric.Float64Histogram
	masterErrs metric.Int64Counter
	failing    metric.Int64Gauge

	mu      sync.RWMutex // guards the maps
	locks   map[lockID]*opts
	masters map[masterID]*masterSets
	answers map[answerID]*opts
}

var _ observe.Observer = (*Observer)(nil)

// New returns an Observer that records with the meter and the tracer of
// the providers set by opts.
func New(options ...Option) (*Observer, error) {
	cfg := config{maxActive: DefaultMaxActiveLocks}
	for _, o := range options {
		o(&cfg)
	}
	if cfg.mp == nil {
		cfg.mp = otelapi.GetMeterProvider()
	}
	if cfg.tp == nil {
		cfg.tp = otelapi.GetTracerProvider()
	}
	m := cfg.mp.Meter(ScopeName)
	o := &Observer{tracer: cfg.tp.Tracer(ScopeName), keyAttr: cfg.keyAttr, active: newActiveLocks(cfg.maxActive),
		locks: make(map[lockID]*opts), masters: make(map[masterID]*masterSets), answers: make(map[answerID]*opts)}
	durations := metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	o.acquireDur, err = m.Float64Histogram("quorumlock.acquire.duration", metric.WithUnit("s"), durations,
		metric.WithDescription("How long an acquisition took, from the call to its result, waits between attempts included."))
	add(err)
	o.attempts, err = m.Int64Histogram("quorumlock.acquire.attempts", metric.WithUnit("{attempt}"),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 5, 10, 20, 50, 100),
		metric.WithDescription("How many attempts an acquisition made."))
	add(err)
	// Observed at collection: a lock whose validity ends leaves it with
	// no event (its holder may have stopped).
	o.activeObs, err = m.Int64ObservableUpDownCounter("quorumlock.locks.active", metric.WithUnit("{lock}"),
		metric.WithDescription("Locks held now: acquired, neither released nor lost, and their validity not ended."))
	add(err)
	if err == nil {
		_, err = m.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
			return o.active.observe(ctx, obs, o.activeObs)
		}, o.activeObs)
		add(err)
	}
	o.hold, err = m.Float64Histogram("quorumlock.lock.hold.duration", metric.WithUnit("s"), durations,
		metric.WithDescription("How long a lock was held, from its acquisition to its release."))
	add(err)
	o.extensions, err = m.Int64Counter("quorumlock.extensions", metric.WithUnit("{extension}"),
		metric.WithDescription("Extensions of a lock, by outcome."))
	add(err)
	o.releases, err = m.Int64Counter("quorumlock.releases", metric.WithUnit("{release}"),
		metric.WithDescription("Releases of a lock, by outcome."))
	add(err)
	o.losses, err = m.Int64Counter("quorumlock.losses", metric.WithUnit("{loss}"),
		metric.WithDescription("Locks lost while held, by cause."))
	add(err)
	o.masterDur, err = m.Float64Histogram("quorumlock.master.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
		metric.WithDescription("How long a master took to answer a command, from the round's start."))
	add(err)
	o.masterErrs, err = m.Int64Counter("quorumlock.master.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Commands a master failed (errors and timeouts)."))
	add(err)
	// No unit: "1" would make the Prometheus exporter call it *_ratio.
	o.failing, err = m.Int64Gauge("quorumlock.master.failing",
		metric.WithDescription("1 while a master is failing (its last command failed), 0 once it answers again."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return o, nil
}

// The attribute sets of the metrics are made once per combination (there
// are few: kinds × outcomes, masters × operations × answers) and kept
// with the option slices the instruments take, so that recording a
// measurement allocates nothing.

// lockID names the attributes of a lock metric.
type lockID struct {
	which     uint8 // mLock, mAcquire, ...
	kind, val string
}

const (
	mLock uint8 = iota
	mAcquire
	mExtend
	mRelease
	mLoss
)

// opts is one attribute set as the instruments take it.
type opts struct {
	set    attribute.Set
	add    []metric.AddOption
	record []metric.RecordOption
}

func newOpts(attrs ...attribute.KeyValue) *opts {
	set := attribute.NewSet(attrs...)
	o := metric.WithAttributeSet(set)
	return &opts{set: set, add: []metric.AddOption{o}, record: []metric.RecordOption{o}}
}

// masterID names a master: one Observer may serve several clients.
type masterID struct {
	index int
	addr  string
}

// masterSets are one master's attributes.
type masterSets struct {
	attrs []attribute.KeyValue // index, server.address, server.port
	mu    sync.RWMutex
	byKey map[[3]string]*opts // {metric, operation, answer or error.type}
}

// lockOpts returns the attributes of a lock metric: the kind, extra =
// val unless extra is "", and with WithKeyAttribute the key.
func (o *Observer) lockOpts(which uint8, key, kind string, extra attribute.Key, val string) *opts {
	if o.keyAttr != nil {
		if kv := o.keyAttr(key); kv != "" {
			attrs := []attribute.KeyValue{KeyLockKind.String(kind), KeyLockKey.String(kv)}
			if extra != "" {
				attrs = append(attrs, extra.String(val))
			}
			return newOpts(attrs...)
		}
	}
	id := lockID{which: which, kind: kind, val: val}
	o.mu.RLock()
	s := o.locks[id]
	o.mu.RUnlock()
	if s != nil {
		return s
	}
	attrs := []attribute.KeyValue{KeyLockKind.String(kind)}
	if extra != "" {
		attrs = append(attrs, extra.String(val))
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if s = o.locks[id]; s == nil {
		s = newOpts(attrs...)
		o.locks[id] = s
	}
	return s
}

// answerID names the attributes of a master's answer time.
type answerID struct {
	index    int
	addr, op string
	answer   observe.Answer
}

// answerOpts returns the attributes of e's answer time: one lookup on
// the hottest path (every answer of every master).
func (o *Observer) answerOpts(e observe.MasterAnswer) *opts {
	id := answerID{e.Index, e.Addr, e.Op, e.Answer}
	o.mu.RLock()
	s := o.answers[id]
	o.mu.RUnlock()
	if s != nil {
		return s
	}
	s = o.master(e.Index, e.Addr).opts([3]string{"duration", e.Op, string(e.Answer)}, KeyOperation, KeyMasterAnswer)
	o.mu.Lock()
	o.answers[id] = s
	o.mu.Unlock()
	return s
}

// master returns master (i, addr)'s attributes.
func (o *Observer) master(i int, addr string) *masterSets {
	id := masterID{i, addr}
	o.mu.RLock()
	m := o.masters[id]
	o.mu.RUnlock()
	if m != nil {
		return m
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if m = o.masters[id]; m == nil {
		m = &masterSets{attrs: masterAttrs(i, addr), byKey: make(map[[3]string]*opts)}
		o.masters[id] = m
	}
	return m
}

// opts returns the master's attributes plus keys[j] = id[j+1] (id[0]
// names the metric).
func (m *masterSets) opts(id [3]string, keys ...attribute.Key) *opts {
	m.mu.RLock()
	s := m.byKey[id]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	attrs := append([]attribute.KeyValue(nil), m.attrs...)
	for i, k := range keys {
		attrs = append(attrs, k.String(id[i+1]))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s = m.byKey[id]; s == nil {
		s = newOpts(attrs...)
		m.byKey[id] = s
	}
	return s
}

// OnAcquire records an acquisition: its duration and attempts by outcome,
// the active locks, and a span with its last attempt's master answers.
func (o *Observer) OnAcquire(ctx context.Context, e observe.AcquireEvent) {
	set := o.lockOpts(mAcquire, e.Key, e.Kind, KeyAcquireOutcome, string(e.Outcome))
	o.acquireDur.Record(ctx, e.Wait.Seconds(), set.record...)
	o.attempts.Record(ctx, int64(e.Attempts), set.record...)
	if e.Outcome == observe.AcquireAcquired {
		o.active.add(e.ID, e.Validity, o.lockOpts(mLock, e.Key, e.Kind, "", "").set)
	}
	if sp := o.start(ctx, "quorumlock acquire", e.Start); sp != nil {
		sp.SetAttributes(KeyLockKey.String(e.Key), KeyLockKind.String(e.Kind), KeyAcquireOutcome.String(string(e.Outcome)),
			KeyAttempts.Int(e.Attempts), KeyQuorum.Int(e.Quorum))
		o.end(sp, e.Start.Add(e.Wait), e.Masters, e.Err, string(e.Outcome))
	}
}

// OnExtend records an extension by outcome, the lock's new validity for
// the active locks, and its span.
func (o *Observer) OnExtend(ctx context.Context, e observe.ExtendEvent) {
	o.extensions.Add(ctx, 1, o.lockOpts(mExtend, e.Key, e.Kind, KeyExtendOutcome, string(e.Outcome)).add...)
	if !o.active.update(e.ID, e.Validity) && e.Outcome == observe.ExtendExtended {
		// Dropped at its old validity's end while the extension ran,
		// which made it valid again.
		o.active.add(e.ID, e.Validity, o.lockOpts(mLock, e.Key, e.Kind, "", "").set)
	}
	if sp := o.start(ctx, "quorumlock extend", e.Start); sp != nil {
		sp.SetAttributes(KeyLockKey.String(e.Key), KeyLockKind.String(e.Kind), KeyExtendOutcome.String(string(e.Outcome)),
			KeyQuorum.Int(e.Quorum))
		o.end(sp, e.Start.Add(e.Duration), e.Masters, e.Err, string(e.Outcome))
	}
}

// OnRelease records a release by outcome, the hold time (unless the lock
// had been lost), the end of an active lock, and its span.
func (o *Observer) OnRelease(ctx context.Context, e observe.ReleaseEvent) {
	o.releases.Add(ctx, 1, o.lockOpts(mRelease, e.Key, e.Kind, KeyReleaseOutcome, string(e.Outcome)).add...)
	o.active.end(e.ID)
	if !e.WasLost {
		o.hold.Record(ctx, e.Held.Seconds(), o.lockOpts(mLock, e.Key, e.Kind, "", "").record...)
	}
	if sp := o.start(ctx, "quorumlock release", e.Start); sp != nil {
		sp.SetAttributes(KeyLockKey.String(e.Key), KeyLockKind.String(e.Kind), KeyReleaseOutcome.String(string(e.Outcome)),
			KeyHeld.Float64(e.Held.Seconds()), KeyQuorum.Int(e.Quorum))
		o.end(sp, e.Start.Add(e.Duration), e.Masters, e.Err, string(e.Outcome))
	}
}

// OnLoss records a loss by cause and the active locks, and adds an event
// to the span in ctx, if any.
func (o *Observer) OnLoss(ctx context.Context, e observe.LossEvent) {
	o.losses.Add(ctx, 1, o.lockOpts(mLoss, e.Key, e.Kind, KeyLossCause, string(e.Cause)).add...)
	o.active.end(e.ID)
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		sp.AddEvent("quorumlock lock lost", trace.WithAttributes(KeyLockKey.String(e.Key), KeyLossCause.String(string(e.Cause)),
			KeyHeld.Float64(e.Held.Seconds())))
	}
}

// OnMasterAnswer records a master's answer time and, for a failure, its
// error count.
func (o *Observer) OnMasterAnswer(ctx context.Context, e observe.MasterAnswer) {
	o.masterDur.Record(ctx, e.Latency.Seconds(), o.answerOpts(e).record...)
	if e.Answer == observe.AnswerFailed {
		m := o.master(e.Index, e.Addr)
		o.masterErrs.Add(ctx, 1, m.opts([3]string{"errors", e.Op, errorType(e.Err)}, KeyOperation, KeyErrorType).add...)
	}
}

// OnMasterState sets the master's failing gauge, and adds an event to the
// span in ctx, if any.
func (o *Observer) OnMasterState(ctx context.Context, e observe.MasterStateEvent) {
	v := int64(0)
	if e.State == observe.MasterFailing {
		v = 1
	}
	m := o.master(e.Index, e.Addr)
	o.failing.Record(ctx, v, m.opts([3]string{"state"}).record...)
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		sp.AddEvent("quorumlock master "+string(e.State), trace.WithAttributes(append(slices.Clip(m.attrs),
			KeyMasterState.String(string(e.State)))...))
	}
}

// masterAttrs names a master: its index, and its address as server.address
// and server.port.
func masterAttrs(i int, addr string) []attribute.KeyValue {
	attrs := []attribute.KeyValue{KeyMasterIndex.Int(i)}
	host, port, err := net.SplitHostPort(hostPort(addr))
	if err != nil {
		return append(attrs, KeyServerAddress.String(addr))
	}
	attrs = append(attrs, KeyServerAddress.String(host))
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, KeyServerPort.Int(p))
	}
	return attrs
}

// hostPort drops a URL's scheme and path from a master's address.
func hostPort(addr string) string {
	for i := 0; i+2 < len(addr); i++ {
		if addr[i:i+3] == "://" {
			addr = addr[i+3:]
			break
		}
	}
	for i := 0; i < len(addr); i++ {
		if addr[i] == '/' || addr[i] == '?' {
			return addr[:i]
		}
	}
	return addr
}

// start starts an operation's span at start, or returns nil when it is
// not recorded (not sampled, or no tracer provider).
func (o *Observer) start(ctx context.Context, name string, start time.Time) trace.Span {
	_, sp := o.tracer.Start(ctx, name, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient))
	if !sp.IsRecording() {
		sp.End()
		return nil
	}
	return sp
}

// end adds an event per master answer to sp, its status, and ends it.
func (o *Observer) end(sp trace.Span, end time.Time, masters []observe.MasterResult, err error, outcome string) {
	for _, r := range masters {
		at := r.At
		answered := r.Answer != observe.AnswerPending && r.Answer != observe.AnswerNotAsked
		if !answered {
			at = end
		}
		ev := append(slices.Clip(o.master(r.Index, r.Addr).attrs), KeyMasterAnswer.String(string(r.Answer)))
		if answered {
			ev = append(ev, KeyMasterLatency.Float64(r.Latency.Seconds()))
		}
		if r.Err != nil {
			ev = append(ev, KeyErrorType.String(errorType(r.Err)), attribute.String("exception.message", r.Err.Error()))
		}
		sp.AddEvent("master answer", trace.WithTimestamp(at), trace.WithAttributes(ev...))
	}
	if err != nil {
		sp.SetStatus(codes.Error, outcome)
		sp.SetAttributes(KeyErrorType.String(outcome))
	}
	sp.End(trace.WithTimestamp(end))
}

// errorType classifies a master's failure for error.type: "timeout",
// "connection", "error_reply", "wrong_kind", "closed" or "other".
func errorType(err error) string {
	var re transport.ReplyError
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, redlock.ErrMasterTimeout):
		return "timeout"
	case errors.Is(err, redlock.ErrWrongKind):
		return "wrong_kind"
	case errors.Is(err, redlock.ErrClosed):
		return "closed"
	case errors.As(err, &re):
		return "error_reply"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed), errors.As(err, &ne):
		return "connection"
	}
	return "other"
}
