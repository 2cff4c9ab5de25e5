package otel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/observe"
	"github.com/quorumlock/quorumlock/otel"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// harness is an otel.Observer on the SDK's in-memory reader and span
// recorder, and real masters.
type harness struct {
	t       *testing.T
	reader  *sdkmetric.ManualReader
	spans   *tracetest.SpanRecorder
	obs     *otel.Observer
	servers []*redistest.Server
}

func newHarness(t *testing.T, n int, opts ...otel.Option) *harness {
	t.Helper()
	h := &harness{t: t, reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := otel.New(append([]otel.Option{otel.WithMeterProvider(mp), otel.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	h.obs = obs
	h.servers = redistest.Start(t, n)
	return h
}

// client is a client of the harness's masters that reports to its observer.
func (h *harness) client(timeout time.Duration, opts ...redlock.Option) *redlock.Client {
	h.t.Helper()
	pools := make([]pool.Pool, len(h.servers))
	for i, s := range h.servers {
		pools[i] = s.Pool()
	}
	c, err := redigo.New(pools, append([]redlock.Option{redlock.WithTimeout(timeout), redlock.WithObserver(h.obs)}, opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

// value sums, over the points of metric name whose attributes include
// every one of want, a counter's or gauge's value or a histogram's count.
func (h *harness) value(name string, want ...attribute.KeyValue) int64 {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	matches := func(s attribute.Set) bool {
		for _, kv := range want {
			if v, ok := s.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes) {
						total += p.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes) {
						total += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes) {
						total += int64(p.Count)
					}
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes) {
						total += int64(p.Count)
					}
				}
			default:
				h.t.Fatalf("metric %s has data of type %T", name, m.Data)
			}
		}
	}
	return total
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, what, cond)
}

func outcome(o observe.AcquireOutcome) attribute.KeyValue {
	return otel.KeyAcquireOutcome.String(string(o))
}

func master(i int) attribute.KeyValue { return otel.KeyMasterIndex.Int(i) }

func op(name string) attribute.KeyValue { return otel.KeyOperation.String(name) }

// One master of five SIGSTOPped: every acquisition succeeds, and the
// metrics say which master fails and how often; once it answers again its
// failing gauge drops to 0.
func TestObserver_metrics_one_master_paused(t *testing.T) {
	h := newHarness(t, 5)
	c := h.client(500 * time.Millisecond)
	ctx := context.Background()
	cycle := func() {
		t.Helper()
		l, err := c.Acquire(ctx, "k", redlock.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // dial every master first
	// The warm-up returned at its quorum: wait until master 3 has run its
	// SET and its release too, so that none of them is still on the way
	// when it stops (it would fail and be counted below).
	waitFor(t, "master 3 ran the warm-up", func() bool {
		v, err := h.servers[3].Do("INFO", "commandstats")
		info, _ := v.([]byte)
		return err == nil && strings.Contains(string(info), "cmdstat_set:calls=1,") &&
			(strings.Contains(string(info), "cmdstat_evalsha:") || strings.Contains(string(info), "cmdstat_eval:"))
	})
	if err := h.servers[3].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.servers[3].Resume() })
	const cycles = 5
	for i := 0; i < cycles; i++ {
		cycle()
	}
	// Each acquisition and each release sent master 3 one command, which
	// fails at its per-master timeout (or sooner, once the client knows
	// the master is stalled). The timeout is generous: on a loaded machine
	// a live master must not fail.
	waitFor(t, "master 3's errors", func() bool { return h.value("quorumlock.master.errors", master(3)) >= 2*cycles })
	if got := h.value("quorumlock.master.errors", master(3), op("acquire")); got != cycles {
		t.Errorf("master 3's acquire errors: %d, want %d", got, cycles)
	}
	if got := h.value("quorumlock.master.errors", master(3), op("release")); got != cycles {
		t.Errorf("master 3's release errors: %d, want %d", got, cycles)
	}
	if got := h.value("quorumlock.master.errors"); got != 2*cycles {
		t.Errorf("errors of all masters: %d, want %d (master 3's only)", got, 2*cycles)
	}
	for _, i := range []int{0, 1, 2, 4} {
		if got := h.value("quorumlock.master.duration", master(i), otel.KeyMasterAnswer.String("ok")); got != 2*(cycles+1) {
			t.Errorf("master %d answered ok %d times, want %d", i, got, 2*(cycles+1))
		}
	}
	if got := h.value("quorumlock.master.failing", master(3)); got != 1 {
		t.Errorf("master 3 failing gauge %d, want 1", got)
	}
	if got := h.value("quorumlock.acquire.duration", outcome(observe.AcquireAcquired)); got != cycles+1 {
		t.Errorf("acquisitions: %d, want %d", got, cycles+1)
	}
	if got := h.value("quorumlock.acquire.duration"); got != cycles+1 {
		t.Errorf("acquisitions of any outcome: %d, want %d", got, cycles+1)
	}
	if got := h.value("quorumlock.acquire.attempts", outcome(observe.AcquireAcquired)); got != cycles+1 {
		t.Errorf("attempts recorded: %d, want %d", got, cycles+1)
	}
	if got := h.value("quorumlock.locks.active"); got != 0 {
		t.Errorf("active locks: %d, want 0", got)
	}
	if got := h.value("quorumlock.lock.hold.duration"); got != cycles+1 {
		t.Errorf("hold times: %d, want %d", got, cycles+1)
	}
	if got := h.value("quorumlock.releases", otel.KeyReleaseOutcome.String("released")); got != cycles+1 {
		t.Errorf("releases: %d, want %d", got, cycles+1)
	}

	if err := h.servers[3].Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "master 3 up again", func() bool {
		cycle()
		return h.value("quorumlock.master.failing", master(3)) == 0
	})
}

// An acquisition on three masters with one hung: its span has an event per
// master, the hung one pending; the span of a contended TryAcquire has the
// refusals and an error status.
func TestObserver_trace_hung_master_and_contention(t *testing.T) {
	h := newHarness(t, 3)
	c := h.client(500 * time.Millisecond)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.servers[1].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.servers[1].Resume() })
	held, err := c.Acquire(ctx, "k", redlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "k"); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}

	var acquires []sdktrace.ReadOnlySpan
	for _, s := range h.spans.Ended() {
		if s.Name() == "quorumlock acquire" {
			acquires = append(acquires, s)
		}
	}
	if len(acquires) != 3 {
		t.Fatalf("%d acquire spans, want 3", len(acquires))
	}
	answers := func(s sdktrace.ReadOnlySpan) map[int64]string {
		got := map[int64]string{}
		for _, ev := range s.Events() {
			if ev.Name != "master answer" {
				continue
			}
			set := attribute.NewSet(ev.Attributes...)
			i, _ := set.Value(otel.KeyMasterIndex)
			a, _ := set.Value(otel.KeyMasterAnswer)
			got[i.AsInt64()] = a.AsString()
			if ev.Time.Before(s.StartTime()) || ev.Time.After(s.EndTime()) {
				t.Errorf("event %v at %v outside its span [%v, %v]", ev.Attributes, ev.Time, s.StartTime(), s.EndTime())
			}
		}
		return got
	}
	won := answers(acquires[1])
	if won[0] != "ok" || won[2] != "ok" || (won[1] != "pending" && won[1] != "failed") || len(won) != 3 {
		t.Errorf("the acquisition with master 1 hung: answers %v", won)
	}
	if acquires[1].Status().Code != codes.Unset {
		t.Errorf("a successful acquisition has status %v", acquires[1].Status())
	}
	lost := answers(acquires[2])
	if lost[0] != "refused" || lost[2] != "refused" {
		t.Errorf("the contended TryAcquire: answers %v", lost)
	}
	if st := acquires[2].Status(); st.Code != codes.Error || st.Description != string(observe.AcquireContended) {
		t.Errorf("the contended TryAcquire's status %v", st)
	}
	if got := h.value("quorumlock.acquire.duration", outcome(observe.AcquireContended)); got != 1 {
		t.Errorf("contended acquisitions: %d, want 1", got)
	}
	var key attribute.Value
	for _, kv := range acquires[2].Attributes() {
		if kv.Key == otel.KeyLockKey {
			key = kv.Value
		}
	}
	if key.AsString() != "k" {
		t.Errorf("the span's key attribute %v", key)
	}
}

// A lock lost at its expiry is counted by cause, leaves the active locks,
// and, with WithKeyAttribute, the metrics name its key.
func TestObserver_loss_by_cause_with_key_attribute(t *testing.T) {
	h := newHarness(t, 3, otel.WithKeyAttribute(func(key string) string {
		if key == "jobs:nightly" {
			return key
		}
		return ""
	}))
	c := h.client(500 * time.Millisecond)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "jobs:nightly", redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Acquire(ctx, "order:12345", redlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	nightly := otel.KeyLockKey.String("jobs:nightly")
	if got := h.value("quorumlock.locks.active", nightly); got != 1 {
		t.Errorf("active jobs:nightly locks: %d, want 1", got)
	}
	if got := h.value("quorumlock.locks.active"); got != 2 {
		t.Errorf("active locks: %d, want 2", got)
	}
	time.Sleep(1100 * time.Millisecond) // the subject: the lock's validity runs out
	if err := l.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after the validity: %v", err)
	}
	_ = l.Release(ctx)
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.value("quorumlock.losses", nightly, otel.KeyLossCause.String(string(observe.LossExpired))); got != 1 {
		t.Errorf("jobs:nightly losses by expiry: %d, want 1", got)
	}
	if got := h.value("quorumlock.losses"); got != 1 {
		t.Errorf("losses: %d, want 1", got)
	}
	if got := h.value("quorumlock.extensions", otel.KeyExtendOutcome.String(string(observe.ExtendLost))); got != 1 {
		t.Errorf("lost extensions: %d, want 1", got)
	}
	if got := h.value("quorumlock.locks.active"); got != 0 {
		t.Errorf("active locks: %d, want 0 (the lost one counted once)", got)
	}
	if got := h.value("quorumlock.lock.hold.duration"); got != 1 {
		t.Errorf("hold times: %d, want 1 (the released lock only)", got)
	}
	if got := h.value("quorumlock.acquire.duration", otel.KeyLockKey.String("order:12345")); got != 0 {
		t.Errorf("a per-entity key became a series: %d points", got)
	}
}
