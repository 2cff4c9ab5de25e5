package redlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
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

// A pipelined connection is down (muxConn.down) when the master has been
// silent for the per-master timeout — measured from the reader's last
// progress, not from when the oldest command was sent: a deep pipeline
// whose master answers steadily is up, however old its oldest command.
func TestMux_downMeasuredFromTheReadersLastProgress(t *testing.T) {
	const timeout = 50 * time.Millisecond
	born := time.Now().Add(-time.Second)
	at := func(ago time.Duration) int64 { return 1 + int64(time.Since(born)-ago) }
	mc := &muxConn{mx: &mux{timeout: timeout}, born: born}
	if err := mc.down(); err != nil {
		t.Fatalf("waiting for no command: down (%v)", err)
	}
	mc.oldest.Store(at(200 * time.Millisecond))
	// down says "known down, not tried", for the silence's reason
	isDown := func(err error) bool {
		var nt *notTriedError
		if !errors.As(err, &nt) {
			return false
		}
		_, ok := nt.cause.(*downError)
		return ok
	}
	if err := mc.down(); !isDown(err) {
		t.Fatalf("oldest command sent 200ms ago, nothing heard since: %v, want down", err)
	}
	mc.heard.Store(at(time.Millisecond))
	if err := mc.down(); err != nil {
		t.Fatalf("oldest command sent 200ms ago, a reply read 1ms ago: down (%v)", err)
	}
	mc.heard.Store(at(120 * time.Millisecond))
	if err := mc.down(); !isDown(err) {
		t.Fatalf("last reply read 120ms ago: %v, want down", err)
	}
}
