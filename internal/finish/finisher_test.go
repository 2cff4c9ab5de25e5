package finish

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/transport"
)

// bound is how long a test waits for what the finisher's goroutine does.
const bound = 5 * time.Second

var errSilent = errors.New("no answer")

// fakeHost records the sends instead of sending them: the test completes
// each one (sent.cmd.To).
type fakeHost struct {
	workers sync.WaitGroup
	sends   chan sent

	mu       sync.Mutex
	closed   bool
	delay    time.Duration // what Backoff returns
	attempts []int         // Backoff's attempt, call by call
}

type sent struct {
	i   int
	cmd *transport.Command
}

func (h *fakeHost) AddWorker() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.workers.Add(1)
	return true
}

func (h *fakeHost) WorkerDone() { h.workers.Done() }

func (h *fakeHost) Send(i int, cmd *transport.Command) { h.sends <- sent{i, cmd} }

func (h *fakeHost) Backoff(_, _ time.Duration, attempt int) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempts = append(h.attempts, attempt)
	return h.delay
}

func (h *fakeHost) setDelay(d time.Duration) {
	h.mu.Lock()
	h.delay = d
	h.mu.Unlock()
}

// fakeJob is a retry whose reply "nothing" is a rollback that found
// nothing to delete: it is confirmed once.
type fakeJob struct {
	rf       Round
	nothing  atomic.Bool // NothingAt
	mu       sync.Mutex
	confirms []bool   // Decode's confirm, send by send
	gaveUp   []string // GaveUp's why
}

func (j *fakeJob) Round() *Round                      { return &j.rf }
func (j *fakeJob) NothingAt(int) bool                 { return j.nothing.Load() }
func (j *fakeJob) Fill(_ int, cmd *transport.Command) { cmd.Name = "DEL" }

func (j *fakeJob) Decode(_ int, confirm bool, res any, err error) (bool, error) {
	j.mu.Lock()
	j.confirms = append(j.confirms, confirm)
	j.mu.Unlock()
	return err == nil && res == "nothing" && !confirm, err
}

func (j *fakeJob) GaveUp(_, _ int, _ error, why string) {
	j.mu.Lock()
	j.gaveUp = append(j.gaveUp, why)
	j.mu.Unlock()
}

func (j *fakeJob) gaveUpWhy() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.gaveUp)
}

// harness is a Finisher of fakeHost; closing it (or the test's end)
// closes the finisher and waits for its goroutine and its sends to end.
type harness struct {
	t       *testing.T
	f       *Finisher
	h       *fakeHost
	logs    bytes.Buffer // the finisher's log, once closed
	closing chan struct{}
	once    sync.Once
}

func newHarness(t *testing.T, ordered ...bool) *harness {
	x := &harness{t: t, f: new(Finisher), h: &fakeHost{sends: make(chan sent, 100), delay: time.Millisecond}, closing: make(chan struct{})}
	x.f.Init(x.h, Config{Ordered: ordered, Timeout: time.Second, Closing: x.closing, Logger: slog.New(slog.NewTextHandler(&x.logs, nil))})
	x.f.SetBackoff(time.Millisecond, time.Millisecond)
	t.Cleanup(x.close)
	return x
}

// close closes the client: sends still held by the test fail.
func (x *harness) close() {
	x.once.Do(func() {
		x.h.mu.Lock()
		x.h.closed = true
		x.h.mu.Unlock()
		close(x.closing)
		done := make(chan struct{})
		go func() {
			x.h.workers.Wait()
			close(done)
		}()
		deadline := time.After(bound)
		for {
			select {
			case s := <-x.h.sends:
				s.cmd.To.Complete(nil, errSilent, transport.SendInfo{})
			case <-done:
				return
			case <-deadline:
				x.t.Fatal("the finisher's goroutine and sends did not end")
			}
		}
	})
}

// next returns the next send.
func (x *harness) next() sent {
	x.t.Helper()
	select {
	case s := <-x.h.sends:
		return s
	case <-time.After(bound):
		x.t.Fatal("no retry was sent")
		return sent{}
	}
}

// waitFor waits until cond holds, under the finisher's mu.
func (x *harness) waitFor(what string, cond func(f *Finisher) bool) {
	x.t.Helper()
	for end := time.Now().Add(bound); ; {
		x.f.mu.Lock()
		ok := cond(x.f)
		x.f.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(end) {
			x.t.Fatalf("still not %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A master whose retry failed gets one retry at a time, after its
// backoff; the others wait for its outcome, and go at once when it
// answers.
func TestFinisher_oneRetryAtATimeWhileAMasterFails(t *testing.T) {
	x := newHarness(t, true, true)
	for range 3 {
		x.f.Retry(new(fakeJob), 0, time.Minute, errSilent)
	}
	oneAlone := func() sent {
		t.Helper()
		s := x.next()
		x.waitFor("two retries held behind the one in flight", func(f *Finisher) bool {
			return len(f.masters[0].held) == 2 && len(f.queue) == 0
		})
		if len(x.h.sends) != 0 || s.i != 0 {
			t.Fatalf("sent to master %d and %d more, want one retry to master 0", s.i, len(x.h.sends))
		}
		return s
	}
	oneAlone().cmd.To.Complete(nil, errSilent, transport.SendInfo{})
	s := oneAlone()
	x.h.setDelay(30 * time.Millisecond)
	failed := time.Now()
	s.cmd.To.Complete(nil, errSilent, transport.SendInfo{})
	s = oneAlone()
	if d := time.Since(failed); d < 30*time.Millisecond {
		t.Errorf("the next retry went %v after the failure, before the master's backoff (30ms)", d)
	}
	s.cmd.To.Complete("1", nil, transport.SendInfo{})
	for range 2 {
		x.next().cmd.To.Complete("1", nil, transport.SendInfo{})
	}
	x.waitFor("every retry ended", func(f *Finisher) bool { return f.outstanding == 0 })
	x.h.mu.Lock()
	defer x.h.mu.Unlock()
	// Each first retry's backoff (attempt 0), then the master's after
	// one failure in a row, and after two.
	if want := []int{0, 0, 0, 0, 1}; !slices.Equal(x.h.attempts, want) {
		t.Errorf("backoff attempts %v, want %v", x.h.attempts, want)
	}
}

// An answer ends the master's run of failures: its next failure backs
// off as the first did.
func TestFinisher_backoffStartsAgainOnceTheMasterAnswers(t *testing.T) {
	x := newHarness(t, true)
	x.f.Retry(new(fakeJob), 0, time.Minute, errSilent)
	x.next().cmd.To.Complete(nil, errSilent, transport.SendInfo{})
	x.next().cmd.To.Complete(nil, errSilent, transport.SendInfo{})
	x.next().cmd.To.Complete("1", nil, transport.SendInfo{})
	x.f.Retry(new(fakeJob), 0, time.Minute, errSilent)
	x.next().cmd.To.Complete(nil, errSilent, transport.SendInfo{})
	x.next().cmd.To.Complete("1", nil, transport.SendInfo{})
	x.waitFor("every retry ended", func(f *Finisher) bool { return f.outstanding == 0 })
	x.h.mu.Lock()
	defer x.h.mu.Unlock()
	if want := []int{0, 0, 1, 0, 0}; !slices.Equal(x.h.attempts, want) {
		t.Errorf("backoff attempts %v, want %v", x.h.attempts, want)
	}
}

// Beyond the limit, a new retry is refused at once, and said so.
func TestFinisher_refusesRetriesBeyondTheLimit(t *testing.T) {
	x := newHarness(t, true)
	x.h.setDelay(time.Minute)
	x.f.SetLimit(2)
	jobs := []*fakeJob{new(fakeJob), new(fakeJob), new(fakeJob)}
	for _, j := range jobs {
		x.f.Retry(j, 0, time.Hour, errSilent)
	}
	if n := x.f.Outstanding(); n != 2 {
		t.Errorf("%d retries outstanding, want 2", n)
	}
	for i, j := range jobs {
		var want []string
		if i == 2 {
			want = []string{TooManyRetries}
		}
		if got := j.gaveUpWhy(); !slices.Equal(got, want) {
			t.Errorf("retry %d given up %q, want %q", i, got, want)
		}
	}
}

// A retry that would go after its key's TTL is given up.
func TestFinisher_givesUpPastTheTTL(t *testing.T) {
	x := newHarness(t, true)
	j := new(fakeJob)
	x.f.Retry(j, 0, 0, errSilent)
	if got := j.gaveUpWhy(); len(got) != 1 || !strings.Contains(got[0], "TTL") {
		t.Errorf("given up %q, want once, for the TTL", got)
	}
	if n := x.f.Outstanding(); n != 0 {
		t.Errorf("%d retries outstanding, want none", n)
	}
}

// A rollback that found nothing is sent once more, as a confirmation.
func TestFinisher_confirmsARollbackThatFoundNothingOnce(t *testing.T) {
	x := newHarness(t, true)
	j := new(fakeJob)
	x.f.Retry(j, 0, time.Minute, errSilent)
	x.next().cmd.To.Complete("nothing", nil, transport.SendInfo{})
	x.next().cmd.To.Complete("nothing", nil, transport.SendInfo{})
	x.waitFor("every retry ended", func(f *Finisher) bool { return f.outstanding == 0 })
	j.mu.Lock()
	defer j.mu.Unlock()
	if want := []bool{false, true}; !slices.Equal(j.confirms, want) {
		t.Errorf("sends confirming %v, want %v", j.confirms, want)
	}
}

// A superseded round's retries are dropped, without a warning, and on a
// transport that is not Ordered the next round waits for its retry in
// flight.
func TestFinisher_supersededRoundsRetriesAreDropped(t *testing.T) {
	x := newHarness(t, false)
	a, b := new(fakeJob), new(fakeJob)
	x.f.Retry(a, 0, time.Minute, errSilent)
	first := x.next()
	x.f.Retry(b, 0, time.Minute, errSilent)
	x.waitFor("b held behind a", func(f *Finisher) bool { return len(f.masters[0].held) == 1 })
	var next Round
	x.f.Supersede(&a.rf, &next)
	x.f.Supersede(&b.rf, &next)
	after := next.WaitAfter(0)
	if after == nil || after.Fired() {
		t.Fatal("the next round does not wait for the superseded round's retry in flight")
	}
	first.cmd.To.Complete(nil, errSilent, transport.SendInfo{})
	if !after.Fired() {
		t.Error("the retry ended, and the next round still waits for it")
	}
	x.waitFor("every retry dropped", func(f *Finisher) bool { return f.outstanding == 0 })
	x.f.Retry(a, 0, time.Minute, errSilent)
	if n, sends := x.f.Outstanding(), len(x.h.sends); n != 0 || sends != 0 {
		t.Errorf("%d retries outstanding and %d sent after supersession, want none", n, sends)
	}
	if ga, gb := a.gaveUpWhy(), b.gaveUpWhy(); len(ga)+len(gb) != 0 {
		t.Errorf("superseded retries given up with %q and %q, want silence", ga, gb)
	}
}

// Newest returns a reentrant owner's previous round.
func TestFinisher_newestReturnsTheOwnersPreviousRound(t *testing.T) {
	x := newHarness(t, true)
	var r1, r2, other Round
	if old := x.f.Newest("owner", &r1, time.Second); old != nil {
		t.Errorf("the owner's first round follows %p", old)
	}
	x.f.Newest("other", &other, time.Second)
	if old := x.f.Newest("owner", &r2, time.Second); old != &r1 {
		t.Errorf("the owner's second round follows %p, want its first %p", old, &r1)
	}
	if n := x.f.Owners(); n != 2 {
		t.Errorf("%d owners kept, want 2", n)
	}
}

// Closing drops what is queued, with one warning that counts the
// retries that leave a key behind; a retry sent is completed by
// Unanswered's holder, once.
func TestFinisher_closeDropsWhatIsQueued(t *testing.T) {
	x := newHarness(t, true, true)
	x.f.Retry(new(fakeJob), 1, time.Hour, errSilent)
	s := x.next()
	if u := x.f.Unanswered(); len(u) != 1 || u[0] != s.cmd.To {
		t.Fatalf("unanswered %v, want the retry sent", u)
	}
	x.h.setDelay(time.Minute)
	nothing := new(fakeJob)
	nothing.nothing.Store(true)
	x.f.Retry(new(fakeJob), 0, time.Hour, errSilent)
	x.f.Retry(new(fakeJob), 0, time.Hour, errSilent)
	x.f.Retry(nothing, 0, time.Hour, errSilent)
	s.cmd.To.Complete(nil, errSilent, transport.SendInfo{})
	s.cmd.To.Complete("1", nil, transport.SendInfo{}) // a second completion is ignored
	x.close()
	if n := x.f.Outstanding(); n != 0 {
		t.Errorf("%d retries outstanding after close, want none", n)
	}
	if logs := x.logs.String(); !strings.Contains(logs, "retries=3") {
		t.Errorf("close logged %q, want the 3 retries that leave a key counted", logs)
	}
}
