package waker

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/wake"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/transport"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeSub is a subscription that the master acknowledges at once: a
// channel is live as soon as Set names it.
type fakeSub struct {
	mu       sync.Mutex
	channels []string
	done     chan struct{}
	once     sync.Once
}

func (s *fakeSub) Set(_ context.Context, channels []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.channels = slices.Clone(channels)
	return nil
}

func (s *fakeSub) Live(channel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.channels, channel)
}

func (s *fakeSub) Done() <-chan struct{} { return s.done }

func (s *fakeSub) Close() error {
	s.once.Do(func() { close(s.done) })
	return nil
}

// fakeHost is a Client of masters whose subscriptions are fakeSubs; it
// keeps each master's notify, to deliver notices by hand.
type fakeHost struct {
	workers sync.WaitGroup
	closed  bool

	mu     sync.Mutex
	notify map[int]func(channel, payload string)
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

func (h *fakeHost) Subscribe(_ context.Context, i int, notify func(channel, payload string)) (transport.Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.notify == nil {
		h.notify = map[int]func(string, string){}
	}
	h.notify[i] = notify
	return &fakeSub{done: make(chan struct{})}, nil
}

func (h *fakeHost) NodeError(_ int, err error) error { return err }
func (h *fakeHost) Failed(int, error)                {}
func (h *fakeHost) LeadFor(string) int               { return -1 }
func (h *fakeHost) RefusedWhereAsked(error) bool     { return false }
func (h *fakeHost) notice(i int, key, payload string) {
	h.notifyOf(i)(layout.WakeChannel(key), payload)
}

func (h *fakeHost) notifyOf(i int) func(string, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.notify[i]
}

// newFakeWaker returns a Waker of n fake masters, closed with the test.
func newFakeWaker(t *testing.T, n int) (*Waker, *fakeHost) {
	t.Helper()
	h := &fakeHost{}
	closing := make(chan struct{})
	w := New(Config{
		Addrs:   make([]string, n),
		Quorum:  n/2 + 1,
		Timeout: 5 * time.Second,
		Clock:   clock.Real(),
		Closing: closing,
		Jitter:  func(d time.Duration) time.Duration { return rand.N(d) },
		Host:    h,
	})
	t.Cleanup(func() {
		close(closing)
		w.Close()
		h.mu.Lock()
		h.closed = true
		h.mu.Unlock()
		h.workers.Wait()
	})
	return w, h
}

// eventually waits, bounded, until ok.
func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !ok(); {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func one(key string) []string { return []string{key} }

// A waiter registering on a key no one followed must try again once the
// key's channel is live on every master; the subscribers make it live,
// and a waiter marked after that needs no second attempt.
func TestWaker_newKeyIsRecheckedOnceLiveOnEveryMaster(t *testing.T) {
	w, _ := newFakeWaker(t, 3)
	m := w.Mark("k", one)
	if m.Live {
		t.Fatal("a key no one follows was marked live")
	}
	wt := w.Wait(one("k"), m, wake.Plain, 0)
	defer wt.Stop(false)
	if !wt.Recheck {
		t.Fatal("a waiter of a key no one followed does not recheck")
	}
	if why := wt.WaitOut(context.Background(), false, time.Hour); why != ResumeRecheck {
		t.Fatalf("the pause ended with %d, want ResumeRecheck", why)
	}
	if live := w.Live("k"); live != 3 {
		t.Fatalf("the recheck ended with the key live on %d masters of 3", live)
	}
	if m := w.Mark("k", one); !m.Live {
		t.Fatal("a key live on every master was not marked live")
	}
}

// A release's first notice wakes the key's waiter, which its pause
// reports; the waiter's leaving keeps the key followed (lingering).
func TestWaker_noticeWakesTheWaiterAndTheKeyLingers(t *testing.T) {
	w, h := newFakeWaker(t, 3)
	wt := w.Wait(one("k"), w.Mark("k", one), wake.Plain, 0)
	eventually(t, "the key live on every master", func() bool { return w.Live("k") == 3 })
	h.notice(1, "k", "rel-1")
	why, lead := wt.Pause(context.Background(), "k", false, time.Hour, time.Now())
	if why != ResumeReleased || lead != -1 {
		t.Fatalf("the pause ended with %d, lead %d; want ResumeReleased, -1", why, lead)
	}
	wt.Tried(nil)
	wt.Stop(true)
	if waited, lingering := w.Counts(); waited != 0 || lingering != 1 {
		t.Fatalf("after the last waiter left: %d keys waited for, %d lingering; want 0, 1", waited, lingering)
	}
}

// The fallback poll replaces the backoff only while the key is live on
// enough masters that every quorum includes one; it is drawn from
// [p/2, p], p = fallbackPoll(ttl, backoffMax).
func TestWaker_pollOnlyWhileLiveOnEnoughMasters(t *testing.T) {
	w, h := newFakeWaker(t, 3)
	h.mu.Lock()
	h.closed = true // no subscriber starts: the key is live nowhere
	h.mu.Unlock()
	wt := w.Wait(one("k"), Mark{}, wake.Plain, 0)
	defer wt.Stop(false)
	if _, ok := wt.Poll(10*time.Second, 250*time.Millisecond); ok {
		t.Fatal("Poll chose the fallback poll for a key live on no master")
	}
	h.mu.Lock()
	h.closed = false
	h.mu.Unlock()
	w.Revive()
	eventually(t, "the key live on every master", func() bool { return w.Live("k") == 3 })
	p := fallbackPoll(10*time.Second, 250*time.Millisecond)
	if p != maxFallbackPoll {
		t.Fatalf("fallbackPoll(10s, 250ms) = %v, want %v", p, maxFallbackPoll)
	}
	d, ok := wt.Poll(10*time.Second, 250*time.Millisecond)
	if !ok || d < p/2 || d > p {
		t.Fatalf("Poll = %v, %v; want a delay in [%v, %v]", d, ok, p/2, p)
	}
}

// A waiter's kind: several keys make a multi-key waiter whatever else it
// is; then a waiting writer, a fair waiter, a reader, a plain one.
func TestKindOf_precedence(t *testing.T) {
	for _, tc := range []struct {
		n       int
		ahead   bool
		shared  bool
		arrival int64
		want    wake.Kind
	}{
		{2, true, true, 1, wake.Multi},
		{1, true, true, 1, wake.Writer},
		{1, false, true, 1, wake.Fair},
		{1, false, true, 0, wake.Reader},
		{1, false, false, 0, wake.Plain},
	} {
		if got := KindOf(tc.n, tc.ahead, tc.shared, tc.arrival); got != tc.want {
			t.Errorf("KindOf(%d, %v, %v, %d) = %d, want %d", tc.n, tc.ahead, tc.shared, tc.arrival, got, tc.want)
		}
	}
}
