package redlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/observe"
	"github.com/quorumlock/quorumlock/redlock"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	observe.NopObserver
	mu       sync.Mutex
	acquires []observe.AcquireEvent
	extends  []observe.ExtendEvent
	releases []observe.ReleaseEvent
	losses   []observe.LossEvent
	answers  []observe.MasterAnswer
	states   []observe.MasterStateEvent
	ctxTags  []string // the ctxTag of each state event's context
}

type ctxTag struct{}

func (r *recorder) OnAcquire(_ context.Context, e observe.AcquireEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Masters = slices.Clone(e.Masters)
	r.acquires = append(r.acquires, e)
}

func (r *recorder) OnExtend(_ context.Context, e observe.ExtendEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Masters = slices.Clone(e.Masters)
	r.extends = append(r.extends, e)
}

func (r *recorder) OnRelease(_ context.Context, e observe.ReleaseEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Masters = slices.Clone(e.Masters)
	r.releases = append(r.releases, e)
}

func (r *recorder) OnLoss(_ context.Context, e observe.LossEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.losses = append(r.losses, e)
}

func (r *recorder) OnMasterAnswer(_ context.Context, e observe.MasterAnswer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers = append(r.answers, e)
}

func (r *recorder) OnMasterState(ctx context.Context, e observe.MasterStateEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, e)
	tag, _ := ctx.Value(ctxTag{}).(string)
	r.ctxTags = append(r.ctxTags, tag)
}

// failedAnswers counts master i's failed answers.
func (r *recorder) failedAnswers(i int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, a := range r.answers {
		if a.Index == i && a.Answer == observe.AnswerFailed {
			n++
		}
	}
	return n
}

func TestObserver_Acquire_contended_then_waits(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		rec := &recorder{}
		c := rs.client(t, path, redlock.WithObserver(rec))
		other := rs.client(t, path)
		ctx := context.Background()
		held, err := other.Acquire(ctx, "k", redlock.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquire(ctx, "k"); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held key: %v", err)
		}
		// The holder lets go after 150 ms: the waiter's story says it waited.
		time.AfterFunc(150*time.Millisecond, func() { _ = held.Release(context.Background()) })
		l, err := c.Acquire(ctx, "k", redlock.WithTTL(5*time.Second), redlock.WithWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if l.Attempts() < 2 || l.Waited() < 100*time.Millisecond {
			t.Errorf("Attempts %d, Waited %v: want ≥ 2 attempts and ≥ 100ms", l.Attempts(), l.Waited())
		}
		if g := l.Granted(); len(g) < 2 {
			t.Errorf("Granted %v: want a quorum of 3", g)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}

		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.acquires) != 2 {
			t.Fatalf("%d acquire events, want 2", len(rec.acquires))
		}
		a := rec.acquires[0]
		if a.Key != "k" || a.Kind != observe.KindPlain || a.Outcome != observe.AcquireContended || a.Attempts != 1 || a.Err == nil {
			t.Errorf("TryAcquire of a held key: %+v", a)
		}
		if len(a.Masters) != 3 {
			t.Fatalf("masters %+v", a.Masters)
		}
		refused := 0
		for i, m := range a.Masters {
			if m.Index != i || m.Addr != rs.servers[i].Addr() {
				t.Errorf("master %d: %+v", i, m)
			}
			if m.Answer == observe.AnswerRefused {
				refused++
				if m.Latency <= 0 || m.At.IsZero() {
					t.Errorf("master %d refused without a latency: %+v", i, m)
				}
			}
		}
		if refused < 2 {
			t.Errorf("%d masters refused, want at least a quorum: %+v", refused, a.Masters)
		}
		b := rec.acquires[1]
		if b.Outcome != observe.AcquireAcquired || b.Attempts != l.Attempts() || b.Wait < l.Waited() || b.Err != nil {
			t.Errorf("Acquire after a wait: %+v (the lock: %d attempts, waited %v)", b, l.Attempts(), l.Waited())
		}
		// A master may grant after the decision, before the event is
		// built: then the event has it and the lock's story does not.
		for _, i := range l.Granted() {
			if b.Masters[i].Answer != observe.AnswerOK {
				t.Errorf("master %d granted the lock, the event says %+v", i, b.Masters[i])
			}
		}
		if len(rec.releases) != 1 || rec.releases[0].Outcome != observe.ReleaseReleased || rec.releases[0].WasLost ||
			rec.releases[0].Held <= 0 {
			t.Errorf("releases %+v", rec.releases)
		}
		if len(rec.losses) != 0 {
			t.Errorf("losses %+v", rec.losses)
		}
	})
}

func TestObserver_Loss_expired_is_logged_and_reported(t *testing.T) {
	rs := startReal(t, 3)
	rec := &recorder{}
	var logs syncBuffer
	c := rs.client(t, pipelinedPath, redlock.WithObserver(rec),
		redlock.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	ctx := context.WithValue(context.Background(), ctxTag{}, "caller")
	l, err := c.Acquire(ctx, "k", redlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(650 * time.Millisecond) // the subject: the lock's validity runs out
	if err := l.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after the validity: %v", err)
	}
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("Release of a lost lock: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.losses) != 1 || rec.losses[0].Cause != observe.LossExpired || rec.losses[0].Key != "k" ||
		rec.losses[0].Held < 600*time.Millisecond {
		t.Errorf("losses %+v", rec.losses)
	}
	if len(rec.extends) != 1 || rec.extends[0].Outcome != observe.ExtendLost || len(rec.extends[0].Masters) != 0 {
		t.Errorf("extends %+v (nothing is sent for an expired lock)", rec.extends)
	}
	if len(rec.releases) != 1 || !rec.releases[0].WasLost || rec.releases[0].Outcome != observe.ReleaseNotHeld {
		t.Errorf("releases %+v", rec.releases)
	}
	if !strings.Contains(logs.String(), `"msg":"redlock: lock lost","key":"k","cause":"expired"`) {
		t.Errorf("the loss is not logged:\n%s", logs.String())
	}
}

func TestObserver_Loss_not_held(t *testing.T) {
	rs := startReal(t, 3)
	rec := &recorder{}
	c := rs.client(t, pooledPath, redlock.WithObserver(rec))
	ctx := context.Background()
	l, err := c.Acquire(ctx, "k", redlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// A SET still on its way would land after the DEL below: wait for
	// it, and put the token where it timed out.
	redistest.Within(5*time.Second, func() bool { return count(rs.values(t, "k"), l.Token()) == len(rs.servers) })
	rs.holdEverywhere(t, "k", l, 5*time.Second)
	for _, s := range rs.servers[:2] {
		if _, err := s.Do("DEL", "k"); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Extend(ctx, 5*time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend of a lock deleted on 2 of 3: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.losses) != 1 || rec.losses[0].Cause != observe.LossNotHeld {
		t.Errorf("losses %+v", rec.losses)
	}
	if len(rec.extends) != 1 || rec.extends[0].Outcome != observe.ExtendLost {
		t.Fatalf("extends %+v", rec.extends)
	}
	refused := 0
	for _, m := range rec.extends[0].Masters {
		if m.Answer == observe.AnswerRefused {
			refused++
		}
	}
	if refused != 2 {
		t.Errorf("extend's masters %+v: want 2 refused", rec.extends[0].Masters)
	}
}

// A paused master (SIGSTOP) is logged once when it turns failing, however
// many commands fail, and once when it answers again, with the count; the
// observer sees the same two changes and each failed answer, and the
// records carry the caller's context.
func TestObserver_MasterState_paused_master_logged_once(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		rec := &recorder{}
		var logs syncBuffer
		tagging := &tagHandler{Handler: slog.NewJSONHandler(&logs, nil)}
		c := rs.client(t, path, redlock.WithTimeout(300*time.Millisecond), redlock.WithObserver(rec),
			redlock.WithLogger(slog.New(tagging)))
		ctx := context.WithValue(context.Background(), ctxTag{}, "caller")
		cycle := func() {
			t.Helper()
			l, err := c.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		cycle()
		if err := rs.servers[2].Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.servers[2].Resume() })
		const cycles = 4
		for i := 0; i < cycles; i++ {
			cycle()
		}
		// Every command to the paused master fails at its timeout.
		waitFor(t, func() bool { return rec.failedAnswers(2) >= 2*cycles })
		if err := rs.servers[2].Resume(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			cycle()
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return len(rec.states) >= 2
		})
		failed := rec.failedAnswers(2)

		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.states) != 2 {
			t.Fatalf("state changes %+v: want failing, then up", rec.states)
		}
		down, up := rec.states[0], rec.states[1]
		var ne *redlock.NodeError
		if down.Index != 2 || down.State != observe.MasterFailing || !errors.As(down.Err, &ne) || ne.Index != 2 {
			t.Errorf("first change %+v", down)
		}
		if up.Index != 2 || up.State != observe.MasterUp || up.Failures != int64(failed) || up.Since <= 0 {
			t.Errorf("second change %+v: want up after %d failures", up, failed)
		}
		if rec.ctxTags[0] != "caller" || rec.ctxTags[1] != "caller" {
			t.Errorf("the observer got contexts tagged %q, want the caller's", rec.ctxTags)
		}
		for _, a := range rec.answers {
			if a.Index != 2 && a.Answer == observe.AnswerFailed {
				t.Errorf("a live master failed: %+v", a)
			}
		}

		var failing, again []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["tag"] != "caller" {
				t.Errorf("log record without the caller's context: %s", line)
			}
			switch rec["msg"] {
			case "redlock: master failing":
				failing = append(failing, rec)
			case "redlock: master answering again":
				again = append(again, rec)
			default:
				t.Errorf("unexpected log record %s", line)
			}
		}
		if len(failing) != 1 || failing[0]["master"] != float64(2) || failing[0]["addr"] != rs.servers[2].Addr() {
			t.Errorf("failing logged %d times: %v", len(failing), failing)
		}
		if len(again) != 1 || again[0]["failures"] != float64(failed) {
			t.Errorf("recovery logged %v: want once, with %d failures", again, failed)
		}
	})
}

// tagHandler adds the ctxTag of a record's context as the attribute "tag".
type tagHandler struct{ slog.Handler }

func (h *tagHandler) Handle(ctx context.Context, r slog.Record) error {
	if tag, ok := ctx.Value(ctxTag{}).(string); ok {
		r.AddAttrs(slog.String("tag", tag))
	}
	return h.Handler.Handle(ctx, r)
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, 10*time.Second, "the condition", cond)
}

// The events name the lock (ID, the same from its acquisition
// to its loss or release, different for another lock) and carry its
// validity (Until as Lock.Until, Validity left), so that an observer can
// tell when a lock nobody releases stops being valid.
func TestObserver_events_carry_lock_ID_and_validity(t *testing.T) {
	rs := startReal(t, 3)
	rec := &recorder{}
	c := rs.client(t, pipelinedPath, redlock.WithObserver(rec))
	ctx := context.Background()
	a, err := c.Acquire(ctx, "id-a", redlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, "id-b", redlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "id-a"); err == nil {
		t.Fatal("a held key taken twice")
	}
	if err := a.Extend(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(650 * time.Millisecond) // the subject: the lock's validity runs out
	if err := b.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after the validity: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.acquires) != 3 {
		t.Fatalf("%d acquire events, want 3", len(rec.acquires))
	}
	ea, eb, refused := rec.acquires[0], rec.acquires[1], rec.acquires[2]
	if ea.ID == 0 || eb.ID == 0 || ea.ID == eb.ID {
		t.Errorf("lock IDs %d and %d: want two distinct, non-zero", ea.ID, eb.ID)
	}
	if refused.ID != 0 || !refused.Until.IsZero() || refused.Validity != 0 {
		t.Errorf("a refused acquisition carries ID %d, Until %v, Validity %v", refused.ID, refused.Until, refused.Validity)
	}
	if ea.Validity <= 9*time.Second || ea.Validity > 10*time.Second || ea.Until.IsZero() {
		t.Errorf("acquisition of a 10s lock: Validity %v, Until %v", ea.Validity, ea.Until)
	}
	if len(rec.extends) != 2 {
		t.Fatalf("%d extend events, want 2", len(rec.extends))
	}
	xa, xb := rec.extends[0], rec.extends[1]
	if xa.ID != ea.ID || xa.Validity <= 19*time.Second || !xa.Until.After(ea.Until) {
		t.Errorf("extension of lock %d to 20s: ID %d, Validity %v", ea.ID, xa.ID, xa.Validity)
	}
	if xb.ID != eb.ID || xb.Outcome != observe.ExtendLost || xb.Validity > 0 {
		t.Errorf("a lost lock's extension: ID %d (want %d), outcome %s, Validity %v (want ≤ 0)", xb.ID, eb.ID, xb.Outcome, xb.Validity)
	}
	if len(rec.losses) != 1 || rec.losses[0].ID != eb.ID {
		t.Errorf("losses %+v, want lock %d's", rec.losses, eb.ID)
	}
	if len(rec.releases) != 1 || rec.releases[0].ID != ea.ID {
		t.Errorf("releases %+v, want lock %d's", rec.releases, ea.ID)
	}
}
