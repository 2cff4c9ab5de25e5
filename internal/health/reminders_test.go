package health

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
// in a reminder at most once per Reminder, with the count of its
// failures; the reminder's clock is moved back here rather than waited for.
func TestObserve_failingMasterReminderCounts(t *testing.T) {
	var logs bytes.Buffer
	h := New([]string{"127.0.0.1:1"}, slog.New(slog.NewJSONHandler(&logs, nil)), nil)
	boom := errors.New("boom")
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		h.Failed(ctx, 0, "acquire", "k", boom)
	}
	// A minute passes: the next failure reminds, once.
	h.m[0].reminded.Add(-int64(Reminder))
	h.m[0].changed.Add(-int64(Reminder))
	for i := 0; i < 3; i++ {
		h.Failed(ctx, 0, "acquire", "k", boom)
	}
	h.Answered(ctx, 0, time.Now())
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
