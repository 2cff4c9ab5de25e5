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

	"github.com/quorumlock/quorumlock/observe"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// The observer seam: outcomes and numbers of events the other tests do not reach, a killed
// (not paused) master's state, and observers that misbehave.

func (r *recorder) snapshot() (acq []observe.AcquireEvent, ext []observe.ExtendEvent, rel []observe.ReleaseEvent,
	loss []observe.LossEvent, states []observe.MasterStateEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(acq, r.acquires...), append(ext, r.extends...), append(rel, r.releases...),
		append(loss, r.losses...), append(states, r.states...)
}

// An Acquire that waits on a held key until its ctx ends is "contended"
// (by design: the holder is why it failed; see
// TestAcquireOutcome_classifies_each_failure), with the attempts it made
// and the time it waited. Where the ctx ends during an attempt, before
// its answers decided (a busy machine may start the last one at the
// deadline), after some masters answered, the outcome is "cancelled", as
// documented; the case is tried again until the ctx ends elsewhere.
func TestObserve_acquireCancelledWhileWaitingIsContended(t *testing.T) {
	rs := startReal(t, 3)
	other := rs.client(t, pipelinedPath)
	held, err := other.Acquire(context.Background(), "k", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	for try := 1; ; try++ {
		rec := &recorder{}
		c := rs.client(t, pipelinedPath, redlock.WithObserver(rec))
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err = c.Acquire(ctx, "k", redlock.WithWait(10*time.Second))
		cancel()
		if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("Acquire of a held key until ctx ends: %v", err)
		}
		acq, _, _, _, _ := rec.snapshot()
		if len(acq) != 1 {
			t.Fatalf("%d acquire events, want 1", len(acq))
		}
		a := acq[0]
		pending := slices.ContainsFunc(a.Masters, func(m observe.MasterResult) bool { return m.Answer == observe.AnswerPending })
		answered := slices.ContainsFunc(a.Masters, func(m observe.MasterResult) bool { return m.Answer != observe.AnswerPending })
		refused := 0
		for _, m := range a.Masters {
			if m.Answer == observe.AnswerRefused {
				refused++
			}
		}
		// A last attempt the ctx cut before any master answered tells
		// nothing: the error is the attempt's before it, contended. One
		// that two refusals of three decided leaves the third pending
		// too, and the ctx then ended between attempts.
		if pending && answered && refused < 2 {
			// The ctx ended during the last attempt, after some answers,
			// before they decided.
			if a.Outcome != observe.AcquireCancelled {
				t.Errorf("event %+v: ctx ended before the last attempt decided, want cancelled", a)
			}
			if try == 5 {
				t.Fatalf("in 5 tries the ctx never ended between attempts")
			}
			t.Logf("try %d: the ctx ended during an attempt; again", try)
			continue
		}
		if a.Outcome != observe.AcquireContended || a.Attempts < 2 || a.Wait < 250*time.Millisecond ||
			a.Wait > 3*time.Second || a.Err == nil || len(a.Masters) != 3 || !errors.Is(a.Err, context.DeadlineExceeded) {
			t.Errorf("event %+v: want contended after ≥ 2 attempts and ≥ 250ms", a)
		}
		return
	}
}

// An Acquire whose ctx ends while its round waits for masters that do not
// answer is "cancelled" too, not "failed_masters".
func TestObserve_acquireCancelledMidRound(t *testing.T) {
	rs := startReal(t, 3)
	rec := &recorder{}
	c := rs.client(t, pipelinedPath, redlock.WithObserver(rec), redlock.WithTimeout(2*time.Second))
	if _, err := c.TryAcquire(context.Background(), "warm-up"); err != nil {
		t.Fatal(err) // the client's first call identifies the masters
	}
	for _, s := range rs.servers[:2] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Resume() })
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err := c.TryAcquire(ctx, "k")
	if err == nil {
		t.Fatal("acquired with 2 of 3 masters paused")
	}
	acq, _, _, _, _ := rec.snapshot()
	if len(acq) != 2 {
		t.Fatalf("%d acquire events, want 2", len(acq))
	}
	if a := acq[1]; a.Outcome != observe.AcquireCancelled || a.Attempts != 1 || a.Wait < 200*time.Millisecond ||
		a.Masters[2].Answer != observe.AnswerOK || a.Masters[0].Answer != observe.AnswerPending {
		t.Errorf("event %+v (err %v): want cancelled, 1 attempt", a, err)
	}
}

// A quorum that grants in time but whose fence commit ends after the TTL
// is "too_late" (a single round cannot be: checkTTL keeps the TTL longer
// than the per-master timeout).
func TestObserve_acquireTooLate(t *testing.T) {
	rs := startReal(t, 3)
	rec := &recorder{}
	c := rs.client(t, pipelinedPath, redlock.WithObserver(rec), redlock.WithTimeout(300*time.Millisecond))
	if _, err := c.TryAcquire(context.Background(), "warm-up"); err != nil {
		t.Fatal(err) // the client's first call identifies the masters
	}
	for _, s := range rs.servers[:2] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Resume() })
	}
	t.Cleanup(func() { rs.servers[2].Resume() })
	// Master 2 grants at once; master 0 at 150 ms (the quorum); master 2
	// is frozen from 100 ms and answers the fence commit at 340 ms, past
	// the TTL of 320 ms.
	time.AfterFunc(100*time.Millisecond, func() { rs.servers[2].Pause() })
	time.AfterFunc(150*time.Millisecond, func() { rs.servers[0].Resume() })
	time.AfterFunc(340*time.Millisecond, func() {
		rs.servers[1].Resume()
		rs.servers[2].Resume()
	})
	_, err := c.TryAcquire(context.Background(), "k", redlock.WithTTL(320*time.Millisecond), redlock.WithFencing())
	if !errors.Is(err, redlock.ErrNotAcquired) {
		acq, _, _, _, _ := rec.snapshot()
		t.Fatalf("TryAcquire whose commit ended after its TTL: %v; %+v", err, acq)
	}
	acq, _, _, _, _ := rec.snapshot()
	if len(acq) != 2 {
		t.Fatalf("%d acquire events, want 2", len(acq))
	}
	a := acq[1]
	if a.Outcome != observe.AcquireTooLate || a.Attempts != 1 || a.Wait < 320*time.Millisecond {
		t.Errorf("event %+v (err %v): want too_late", a, err)
	}
}

// WithMaxHold ends an auto-extended lock once: one loss, cause max_hold,
// held about the maximum.
func TestObserve_lossMaxHold(t *testing.T) {
	rs := startReal(t, 3)
	rec := &recorder{}
	c := rs.client(t, pipelinedPath, redlock.WithObserver(rec))
	l, err := c.Acquire(context.Background(), "k", redlock.WithTTL(time.Second),
		redlock.WithAutoExtend(100*time.Millisecond), redlock.WithMaxHold(400*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("not lost at its max hold")
	}
	if !errors.Is(l.Err(), redlock.ErrMaxHold) {
		t.Fatalf("Err %v", l.Err())
	}
	// Lost closes before the loss is reported.
	waitFor(t, func() bool { _, _, _, loss, _ := rec.snapshot(); return len(loss) > 0 })
	time.Sleep(200 * time.Millisecond) // the subject: a spell in which a second report would come
	_, ext, _, loss, _ := rec.snapshot()
	if len(loss) != 1 || loss[0].Cause != observe.LossMaxHold || loss[0].Held < 400*time.Millisecond ||
		loss[0].Held > 2*time.Second || loss[0].Key != "k" {
		t.Errorf("losses %+v", loss)
	}
	if len(ext) == 0 {
		t.Errorf("no extension reported in 400ms of auto-extension every 100ms")
	}
	for _, e := range ext {
		if e.Outcome != observe.ExtendExtended {
			t.Errorf("extension %+v", e)
		}
	}
}

// A majority killed under an auto-extended lock: one loss, with a cause
// that says the extensions failed (not_extended or expired), logged once.
func TestObserve_lossMajorityKilledDuringAutoExtend(t *testing.T) {
	rs := startReal(t, 3)
	rec := &recorder{}
	var logs syncBuffer
	c := rs.client(t, pipelinedPath, redlock.WithObserver(rec), redlock.WithTimeout(100*time.Millisecond),
		redlock.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	l, err := c.Acquire(context.Background(), "k", redlock.WithTTL(800*time.Millisecond),
		redlock.WithAutoExtend(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rs.servers[:2] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("not lost with 2 of 3 masters killed")
	}
	lostErr := l.Err()
	time.Sleep(300 * time.Millisecond) // the subject: no second loss is reported
	_ = l.Release(context.Background())
	_, ext, rel, loss, states := rec.snapshot()
	if len(loss) != 1 {
		t.Fatalf("losses %+v, want 1", loss)
	}
	if loss[0].Cause != observe.LossNotExtended && loss[0].Cause != observe.LossExpired {
		t.Errorf("loss %+v (Err %v): want not_extended or expired", loss[0], lostErr)
	}
	if !errors.Is(loss[0].Err, redlock.ErrLockLost) {
		t.Errorf("loss error %v", loss[0].Err)
	}
	t.Logf("loss cause %s after %v; %d extension events", loss[0].Cause, loss[0].Held, len(ext))
	if len(rel) != 1 || !rel[0].WasLost {
		t.Errorf("releases %+v", rel)
	}
	failing := map[int]int{}
	for _, s := range states {
		if s.State == observe.MasterFailing {
			failing[s.Index]++
		}
	}
	if failing[0] != 1 || failing[1] != 1 || failing[2] != 0 || len(states) != 2 {
		t.Errorf("state changes %+v: want masters 0 and 1 failing, once each", states)
	}
	if n := strings.Count(logs.String(), `"msg":"redlock: lock lost"`); n != 1 {
		t.Errorf("loss logged %d times:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), `"msg":"redlock: master failing"`); n != 2 {
		t.Errorf("master failing logged %d times, want 2 (once per master):\n%s", n, logs.String())
	}
}

// A killed master (connections refused) and the same master restarted:
// failing once and up once, on both paths, however many commands fail, and
// the log says so once each, with the count.
func TestObserve_masterStateKilledAndRestartedOnce(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		rec := &recorder{}
		var logs syncBuffer
		c := rs.client(t, path, redlock.WithObserver(rec), redlock.WithTimeout(300*time.Millisecond),
			redlock.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
		ctx := context.Background()
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
		if err := rs.servers[2].Kill(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10; i++ {
			cycle()
		}
		waitFor(t, func() bool { return rec.failedAnswers(2) >= 20 })
		if err := rs.servers[2].Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			cycle()
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return len(rec.states) >= 2
		})
		for i := 0; i < 10; i++ { // no flapping after it is up
			cycle()
		}
		time.Sleep(100 * time.Millisecond) // the subject: no further state report comes
		failed := rec.failedAnswers(2)
		_, _, _, _, states := rec.snapshot()
		if len(states) != 2 || states[0].State != observe.MasterFailing || states[1].State != observe.MasterUp ||
			states[0].Index != 2 || states[1].Index != 2 {
			t.Fatalf("state changes %+v: want master 2 failing, then up", states)
		}
		if states[1].Failures != int64(failed) || states[1].Since <= 0 {
			t.Errorf("up %+v: want %d failures", states[1], failed)
		}
		var failing, again int
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var r map[string]any
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			switch r["msg"] {
			case "redlock: master failing":
				failing++
			case "redlock: master answering again":
				again++
				if r["failures"] != float64(failed) {
					t.Errorf("recovery logged with %v failures, want %d", r["failures"], failed)
				}
			default:
				t.Errorf("unexpected log record %s", line)
			}
		}
		if failing != 1 || again != 1 {
			t.Errorf("logged failing %d times and recovery %d times, want once each:\n%s", failing, again, logs.String())
		}
	})
}

// Release reports how long the lock was held.
func TestObserve_releaseHeldDuration(t *testing.T) {
	rs := startReal(t, 3)
	rec := &recorder{}
	c := rs.client(t, pooledPath, redlock.WithObserver(rec))
	l, err := c.Acquire(context.Background(), "k", redlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // the subject: the time held, which Release reports
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = l.Release(context.Background()) // a second Release sends nothing: no event
	_, _, rel, loss, _ := rec.snapshot()
	if len(rel) != 1 {
		t.Fatalf("releases %+v, want 1", rel)
	}
	if r := rel[0]; r.Held < 250*time.Millisecond || r.Held > 2*time.Second || r.Outcome != observe.ReleaseReleased ||
		r.Duration <= 0 || r.Duration > r.Held || len(r.Masters) != 3 || r.Quorum != 2 {
		t.Errorf("release %+v: want held ≥ 250ms", r)
	}
	if len(loss) != 0 {
		t.Errorf("losses %+v", loss)
	}
}

// An observer called from many goroutines at once, with a logger, under
// -race: the events balance.
func TestObserve_concurrentClientsBalance(t *testing.T) {
	rs := startReal(t, 3)
	rec := &recorder{}
	var logs syncBuffer
	c := rs.client(t, pipelinedPath, redlock.WithObserver(rec),
		redlock.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	const workers, cycles = 8, 15
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < cycles; i++ {
				l, err := c.Acquire(context.Background(), "shared", redlock.WithWait(10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				_ = l.Extend(context.Background(), 5*time.Second)
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	acq, ext, rel, loss, _ := rec.snapshot()
	acquired := 0
	attempts := 0
	for _, a := range acq {
		if a.Outcome == observe.AcquireAcquired {
			acquired++
		}
		attempts += a.Attempts
	}
	if acquired != got || len(acq) != got || len(rel) != got || len(ext) != got || len(loss) != 0 {
		t.Errorf("%d locks taken; events: %d acquires (%d acquired), %d extends, %d releases, %d losses",
			got, len(acq), acquired, len(ext), len(rel), len(loss))
	}
	t.Logf("%d locks, %d attempts in all", got, attempts)
}

// panicky is an Observer whose OnAcquire panics.
type panicky struct{ observe.NopObserver }

func (panicky) OnAcquire(context.Context, observe.AcquireEvent) { panic("observer bug") }

// An Observer that panics in OnAcquire must not crash the caller, nor
// strand a lock that the caller never got (held, and with auto-extension
// extended for ever by a watchdog nobody can stop).
func TestObserve_panickingOnAcquireStrandsNoLock(t *testing.T) {
	rs := startReal(t, 3)
	c := rs.client(t, pipelinedPath, redlock.WithObserver(panicky{}))
	var l *redlock.Lock
	var err error
	panicked := func() (p any) {
		defer func() { p = recover() }()
		l, err = c.Acquire(context.Background(), "k", redlock.WithTTL(2*time.Second), redlock.WithAutoExtend(200*time.Millisecond))
		return nil
	}()
	if panicked != nil {
		time.Sleep(2500 * time.Millisecond) // the subject: the TTL of the lock nobody holds passes
		t.Fatalf("Acquire panicked with the observer's panic %v; the masters still hold the lock nobody has after its TTL: %q",
			panicked, rs.values(t, "k"))
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// answerPanicky panics in OnMasterAnswer, which runs on a transport's
// goroutine: unrecovered, it would end the process.
type answerPanicky struct{ observe.NopObserver }

func (answerPanicky) OnMasterAnswer(context.Context, observe.MasterAnswer) { panic("observer bug") }

func TestObserve_panickingOnMasterAnswer(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		var logs syncBuffer
		c := rs.client(t, path, redlock.WithObserver(answerPanicky{}),
			redlock.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
		for i := 0; i < 3; i++ {
			l, err := c.Acquire(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if n := strings.Count(logs.String(), `"msg":"redlock: observer panicked","method":"OnMasterAnswer"`); n != 1 {
			t.Errorf("the panic logged %d times, want once:\n%s", n, logs.String())
		}
	})
}

// slowAnswers blocks in OnMasterAnswer for master 0's answers.
type slowAnswers struct {
	observe.NopObserver
	d time.Duration
}

func (s slowAnswers) OnMasterAnswer(_ context.Context, e observe.MasterAnswer) {
	if e.Index == 0 {
		time.Sleep(s.d) // the subject: an observer that blocks this long
	}
}

// An observer that blocks in OnMasterAnswer for one master holds up that
// master's answers (documented on Observer), not the quorum of the others.
func TestObserve_blockingOnMasterAnswerHoldsOnlyThatMaster(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		const d = 400 * time.Millisecond
		c := rs.client(t, path, redlock.WithObserver(slowAnswers{d: d}))
		// The first call waits for every master's identity (the run_id
		// probe beside its round, up to the per-master timeout), master
		// 0's held up by the observer too: measured are the calls after.
		if l, err := c.Acquire(context.Background(), "warm"); err != nil {
			t.Fatal(err)
		} else if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		var worst time.Duration
		start := time.Now()
		for i := 0; i < 5; i++ {
			call := time.Now()
			l, err := c.Acquire(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			worst = max(worst, time.Since(call))
		}
		t.Logf("5 cycles with master 0's answers observed for %v each: %v in all, worst cycle %v",
			d, time.Since(start), worst)
		if worst >= d {
			t.Errorf("a cycle took %v: the quorum of masters 1 and 2 waited for the observer of master 0", worst)
		}
	})
}

// Lock.Waited and the event's Wait count "from the call to its result":
// also the first call's identification of the masters, which waits for a
// paused master up to the per-master timeout.
func TestObserve_waitedCountsTheWholeCall(t *testing.T) {
	rs := startReal(t, 3)
	rec := &recorder{}
	c := rs.client(t, pipelinedPath, redlock.WithObserver(rec), redlock.WithTimeout(300*time.Millisecond))
	if err := rs.servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.servers[2].Resume() })
	call := time.Now()
	l, err := c.Acquire(context.Background(), "k")
	took := time.Since(call)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	acq, _, _, _, _ := rec.snapshot()
	if len(acq) != 1 {
		t.Fatalf("%d acquire events", len(acq))
	}
	t.Logf("the call took %v; Waited %v, event Wait %v", took, l.Waited(), acq[0].Wait)
	if l.Waited() < took-50*time.Millisecond || acq[0].Wait < took-50*time.Millisecond {
		t.Errorf("the call took %v; Waited %v, event Wait %v: want about the call's time", took, l.Waited(), acq[0].Wait)
	}
}

// Close with an observer and auto-extended locks: each lock is lost once,
// cause closed; an acquisition waiting on a held key ends "closed"; the
// goroutines end (goleak in TestMain).
func TestObserve_closeWithObserver(t *testing.T) {
	rs := startReal(t, 3)
	rec := &recorder{}
	c, err := redigo.New(rs.pools, testOptions(pipelinedPath, []redlock.Option{redlock.WithObserver(rec)})...)
	if err != nil {
		t.Fatal(err)
	}
	var locks []*redlock.Lock
	for _, k := range []string{"a", "b", "c"} {
		l, err := c.Acquire(context.Background(), k, redlock.WithTTL(2*time.Second), redlock.WithAutoExtend(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := c.Acquire(context.Background(), "a", redlock.WithWait(10*time.Second))
		waiting <- err
	}()
	waitFor(t, func() bool { _, n, _ := c.Sizes(); return n == 1 }) // refused, it waits
	c.Close()
	if err := <-waiting; !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("a waiting Acquire after Close: %v", err)
	}
	for _, l := range locks {
		<-l.Lost()
	}
	acq, _, _, loss, _ := rec.snapshot()
	causes := map[string]int{}
	for _, l := range loss {
		if l.Cause != observe.LossClosed {
			t.Errorf("loss %+v", l)
		}
		causes[l.Key]++
	}
	if len(loss) != 3 || causes["a"] != 1 || causes["b"] != 1 || causes["c"] != 1 {
		t.Errorf("losses %+v: want a, b and c once each", loss)
	}
	if len(acq) != 4 || acq[3].Outcome != observe.AcquireClosed || acq[3].Attempts < 1 {
		t.Errorf("acquires %+v: want the waiter's last, closed", acq)
	}
}
