package redlock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A master that keeps failing is logged when it turns failing, then only
// in a reminder at most once per failureReminder, with the count of its
// failures; the reminder's clock is moved back here rather than waited for.
func TestObserve_failingMasterReminderCounts(t *testing.T) {
	var logs bytes.Buffer
	c := &Client{logger: slog.New(slog.NewJSONHandler(&logs, nil)), health: make([]masterHealth, 1)}
	m := &master{index: 0, addr: "127.0.0.1:1"}
	boom := errors.New("boom")
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		c.masterFailed(ctx, opAcquire, "k", m, boom)
	}
	// A minute passes: the next failure reminds, once.
	c.health[0].reminded.Add(-int64(failureReminder))
	c.health[0].changed.Add(-int64(failureReminder))
	for i := 0; i < 3; i++ {
		c.masterFailed(ctx, opAcquire, "k", m, boom)
	}
	c.masterAnswered(ctx, m, time.Now())
	var msgs []string
	var remind, again map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, r["msg"].(string))
		switch r["msg"] {
		case "redlock: master still failing":
			remind = r
		case "redlock: master answering again":
			again = r
		}
	}
	want := []string{"redlock: master failing", "redlock: master still failing", "redlock: master answering again"}
	if strings.Join(msgs, "|") != strings.Join(want, "|") {
		t.Fatalf("logged %q, want %q", msgs, want)
	}
	if remind["failures"] != float64(6) || remind["addr"] != "127.0.0.1:1" {
		t.Errorf("reminder %v: want 6 failures", remind)
	}
	if again["failures"] != float64(8) {
		t.Errorf("recovery %v: want 8 failures", again)
	}
}
