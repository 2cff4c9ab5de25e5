package redlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
)

// lateTransport is an Ordered transport that answers every command after
// a delay, as a master would whose answers this process reads late; its
// Silence (Silencer) is what the test says: how long the master has kept
// its reader waiting. No Redis involved.
type lateTransport struct {
	addr  string
	delay time.Duration
	// quiet returns the transport's silence; sent is when the command
	// the reader waits for was sent.
	quiet func(sent time.Time) time.Duration

	mu      sync.Mutex
	sent    time.Time
	pending map[*Command]*time.Timer
}

func (lt *lateTransport) Addr() string  { return lt.addr }
func (lt *lateTransport) Ordered() bool { return true }
func (lt *lateTransport) Send(cmd *Command) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	lt.sent = time.Now()
	if lt.pending == nil {
		lt.pending = map[*Command]*time.Timer{}
	}
	lt.pending[cmd] = time.AfterFunc(lt.delay, func() {
		lt.mu.Lock()
		_, ok := lt.pending[cmd]
		delete(lt.pending, cmd)
		lt.mu.Unlock()
		if !ok {
			return // Close completed it
		}
		if cmd.Name == "SET" {
			cmd.Complete("OK", nil, SendInfo{Sent: true})
			return
		}
		cmd.Complete(int64(1), nil, SendInfo{Sent: true})
	})
}
func (lt *lateTransport) Silence() time.Duration {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.quiet(lt.sent)
}
func (lt *lateTransport) Subscribe(context.Context, func(string, string)) (Subscription, error) {
	return nil, ErrClosed
}
func (lt *lateTransport) Close() error {
	lt.mu.Lock()
	pending := lt.pending
	lt.pending = nil
	lt.mu.Unlock()
	for cmd, t := range pending {
		t.Stop()
		cmd.Complete(nil, ErrClosed, SendInfo{Sent: true})
	}
	return nil
}

// A master whose answer comes after the per-master timeout while its
// reader is behind — this process, not the master, kept the answer from
// being read (the CPUs busy elsewhere) — still counts: the acquisition
// succeeds and its release is confirmed.
func TestCollect_lateAnswerCountsWhileItsReaderIsBehind(t *testing.T) {
	// Answered a quarter of the timeout after it: the extended wait (up
	// to twice the timeout) leaves a loaded machine three quarters of a
	// timeout of slack.
	const timeout = 200 * time.Millisecond
	lt := &lateTransport{addr: "late:1", delay: timeout * 5 / 4, quiet: func(time.Time) time.Duration { return 0 }}
	c, err := NewWithTransports([]Transport{lt}, WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire: %v; want the late answer counted", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v; want the late answer counted", err)
	}
}

// A master that has kept its reader waiting for the whole per-master
// timeout (hung, SIGSTOPped) is counted as failed then, as before; and a
// master that seems to answer but never answers this command is given up
// at two per-master timeouts at most.
func TestCollect_silentMasterFailsAtTheTimeout(t *testing.T) {
	const timeout = 40 * time.Millisecond
	for _, tc := range []struct {
		name  string
		quiet func(sent time.Time) time.Duration
		bound time.Duration
	}{
		{"silent since sent", func(sent time.Time) time.Duration { return time.Since(sent) }, timeout},
		{"never silent", func(time.Time) time.Duration { return 0 }, 2 * timeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := &lateTransport{addr: "late:1", delay: time.Minute, quiet: tc.quiet}
			c, err := NewWithTransports([]Transport{lt}, WithTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			_, err = c.TryAcquire(context.Background(), "k")
			took := time.Since(start)
			if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, ErrMasterTimeout) {
				t.Fatalf("TryAcquire: %v; want a timeout of the master", err)
			}
			// The bound, and as much again for a timer this loaded
			// machine fires late (overdue gives the readers that long),
			// and a loaded machine's slack; never the answer's minute.
			if took < tc.bound || took > 2*tc.bound+timeout+2*time.Second {
				t.Fatalf("TryAcquire took %v; want about %v", took, tc.bound)
			}
		})
	}
}

// readerTransport is an unordered transport on a fake clock whose SETs
// either are answered at once ("OK"), or wait for the test (release),
// or are never answered (until Close); its other commands are answered
// at once. Its Silence is 0 while the test says the master answered
// (reading: its reply is read, not yet delivered), else the fake time
// since its first unanswered SET was sent. No Redis involved.
type readerTransport struct {
	addr    string
	clk     *clock.Fake
	hold    bool // SETs wait for release or Close
	reading bool // Silence is 0: the master answered, its reader is behind

	mu   sync.Mutex
	sent time.Time // the first held SET's send, on clk
	held []*Command
}

func (h *readerTransport) Addr() string { return h.addr }
func (h *readerTransport) Send(cmd *Command) {
	switch {
	case cmd.Name == "INFO":
		cmd.Complete(nil, ReplyError(redis.Error("ERR unknown command 'INFO'")), SendInfo{})
	case cmd.Name == "SET" && h.hold:
		h.mu.Lock()
		if len(h.held) == 0 {
			h.sent = h.clk.Now()
		}
		h.held = append(h.held, cmd)
		h.mu.Unlock()
	case cmd.Name == "SET":
		cmd.Complete("OK", nil, SendInfo{Sent: true})
	default:
		cmd.Complete(int64(1), nil, SendInfo{Sent: true})
	}
}

// release answers the held SETs with reply.
func (h *readerTransport) release(reply any) {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, cmd := range held {
		cmd.Complete(reply, nil, SendInfo{Sent: true})
	}
}

func (h *readerTransport) Silence() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reading || len(h.held) == 0 {
		return 0
	}
	return h.clk.Since(h.sent)
}
func (h *readerTransport) Subscribe(context.Context, func(string, string)) (Subscription, error) {
	return nil, ErrClosed
}
func (h *readerTransport) Close() error {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	for _, cmd := range held {
		cmd.Complete(nil, ErrClosed, SendInfo{Sent: true})
	}
	return nil
}

// A master silent for the whole per-master timeout fails then, also when
// another master's answer was not read by then (its reader behind, the
// master not silent) and the round waits on for it: once that answer is
// read, the round has no reason left to wait, and ends at once with the
// silent master failed — not at the wait's end, when a late grant of the
// silent master would still count. (It waited to the end before; on the
// fake clock, forever: TestTryAcquire_lateSuccessIsRolledBack hung about
// once in 40 runs so.)
func TestCollect_waitEndsWhenOnlySilentMastersAreLeft(t *testing.T) {
	const timeout = 100 * time.Millisecond
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	quick := &readerTransport{addr: "quick:1", clk: clk}
	behind := &readerTransport{addr: "behind:1", clk: clk, hold: true, reading: true}
	hung := &readerTransport{addr: "hung:1", clk: clk, hold: true}
	c, err := NewWithTransports([]Transport{quick, behind, hung}, WithClock(clk), WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Let the rollbacks chained behind the hung SET give up.
		for i := 0; i < 4; i++ {
			clk.Advance(timeout)
		}
		c.Close()
	}()
	// The masters are identified first (none has a run_id: each is a
	// vote of its own), so that the round counts the quick master's grant
	// whenever the first probe would have ended.
	if err := c.identify(); err != nil {
		t.Fatal(err)
	}
	if err := c.identified(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := c.TryAcquire(context.Background(), "k")
		res <- err
	}()
	block := func(n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := clk.BlockUntil(ctx, n); err != nil {
			t.Fatalf("waiting for %d timers (have %d): %v", n, clk.Pending(), err)
		}
	}
	block(1) // collect's timer: every SET is sent by then
	clk.Advance(timeout)
	// The hung master is silent for the timeout, the one behind is not:
	// collect waits on (its timer again), with one yes.
	block(1)
	select {
	case err := <-res:
		t.Fatalf("TryAcquire returned (%v) with the behind master's answer unread", err)
	default:
	}
	// The behind master's refusal is read, the clock standing still: the
	// hung master is all that is left, and has been silent for the
	// timeout.
	behind.release(nil)
	select {
	case err := <-res:
		var qe *QuorumError
		if !errors.As(err, &qe) || !errors.Is(err, ErrNotAcquired) || !errors.Is(err, ErrMasterTimeout) ||
			qe.Succeeded != 1 || len(qe.Refused) != 1 || qe.Refused[0] != 1 || !failedAt(errsOf(qe), 2) {
			t.Fatalf("TryAcquire: %v; want master 2 failed by its timeout, master 1 refused", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the round still waits, with only a master silent for the timeout unanswered (pending timers: %d)", clk.Pending())
	}
}

// errsOf returns the failures a *QuorumError holds.
func errsOf(qe *QuorumError) []error {
	if qe.Failed == nil {
		return nil
	}
	return qe.Failed.Errors
}
