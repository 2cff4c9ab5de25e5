package otel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quorumlock/quorumlock/otel"
)

// Without WithKeyAttribute no metric carries the key, however many keys;
// the number of series stays bounded by kinds, outcomes and masters.
func TestMetrics_seriesBoundedWithoutKeyAttribute(t *testing.T) {
	h := newHarness(t, 3)
	c := h.client(500 * time.Millisecond)
	for i := 0; i < 50; i++ {
		l, err := c.Acquire(context.Background(), "order:"+string(rune('a'+i%26))+time.Now().Format("150405.000000"))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	series := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			count := func(n int) { series += n }
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				count(len(d.DataPoints))
				for _, p := range d.DataPoints {
					if p.Attributes.HasValue(otel.KeyLockKey) {
						t.Errorf("%s carries the key", m.Name)
					}
				}
			case metricdata.Histogram[float64]:
				count(len(d.DataPoints))
				for _, p := range d.DataPoints {
					if p.Attributes.HasValue(otel.KeyLockKey) {
						t.Errorf("%s carries the key", m.Name)
					}
				}
			case metricdata.Histogram[int64]:
				count(len(d.DataPoints))
				for _, p := range d.DataPoints {
					if p.Attributes.HasValue(otel.KeyLockKey) {
						t.Errorf("%s carries the key", m.Name)
					}
				}
			}
		}
	}
	// acquire duration + attempts (1 outcome), active, hold, releases:
	// 5; per master: answer times of acquire and release: 6.
	if series > 11 {
		t.Errorf("%d series after 50 keys, want at most 11", series)
	}
	t.Logf("%d series after 50 distinct keys", series)
}
