package redlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/redlock"
)

// Attacks on the transport seam: transports that break Transport's
// contract in the ways a buggy adapter would. The Client must not
// deadlock, panic, leak goroutines or count a reply that is not one
// master's one answer as a vote. No Redis: the fakes answer from a table.

// seamMode is how a seamFake misbehaves when it completes a command.
type seamMode int

const (
	seamAsync            seamMode = iota // completes once, on a goroutine of its own
	seamSync                             // completes once, inside Send
	seamTwice                            // completes twice, inside Send
	seamNever                            // never completes; Close completes with ErrClosed
	seamNeverEvenAtClose                 // never completes, not even at Close
)

// seamFake is a Transport that answers every command from answer, and
// completes it as mode says.
type seamFake struct {
	addr    string
	mode    seamMode
	ordered bool
	answer  func(cmd *redlock.Command) (any, error)

	mu     sync.Mutex
	closed bool
	held   []*redlock.Command
	wg     sync.WaitGroup
	sends  atomic.Int64
	names  sync.Map // command name or script name → count (*atomic.Int64)
}

func (f *seamFake) Addr() string  { return f.addr }
func (f *seamFake) Ordered() bool { return f.ordered }

func (f *seamFake) Send(cmd *redlock.Command) {
	f.sends.Add(1)
	name := cmd.Name
	if cmd.Script != nil {
		name = cmd.Script.Name()
	}
	n, _ := f.names.LoadOrStore(name, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		cmd.Complete(nil, redlock.ErrClosed, redlock.SendInfo{})
		return
	}
	switch f.mode {
	case seamNever, seamNeverEvenAtClose:
		f.held = append(f.held, cmd)
		f.mu.Unlock()
		return
	case seamAsync:
		f.wg.Add(1)
		f.mu.Unlock()
		go func() {
			defer f.wg.Done()
			v, err := f.answer(cmd)
			cmd.Complete(v, err, redlock.SendInfo{Sent: true})
		}()
		return
	}
	f.mu.Unlock()
	v, err := f.answer(cmd)
	cmd.Complete(v, err, redlock.SendInfo{Sent: true})
	if f.mode == seamTwice {
		cmd.Complete(v, err, redlock.SendInfo{Sent: true})
	}
}

func (f *seamFake) count(name string) int64 {
	n, ok := f.names.Load(name)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

func (f *seamFake) Subscribe(context.Context, func(string, string)) (redlock.Subscription, error) {
	return nil, errors.New("seamFake: no subscriptions")
}

func (f *seamFake) Close() error {
	f.mu.Lock()
	f.closed = true
	held := f.held
	f.held = nil
	f.mu.Unlock()
	if f.mode != seamNeverEvenAtClose {
		for _, c := range held {
			c.Complete(nil, redlock.ErrClosed, redlock.SendInfo{Sent: true})
		}
	}
	f.wg.Wait()
	return nil
}

// grant answers as a master on which every lock is free and every
// release finds its token.
func grant(cmd *redlock.Command) (any, error) {
	if cmd.Script == nil {
		return "OK", nil
	}
	return int64(1), nil
}

// refuse answers as a master on which another token holds every key.
func refuse(cmd *redlock.Command) (any, error) {
	if cmd.Script == nil {
		return nil, nil
	}
	return int64(0), nil
}

func seamClient(t *testing.T, ts ...*seamFake) *redlock.Client {
	t.Helper()
	tr := make([]redlock.Transport, len(ts))
	for i, f := range ts {
		tr[i] = f
	}
	c, err := redlock.NewWithTransports(tr, redlock.WithTimeout(50*time.Millisecond),
		redlock.WithLogger(slog.New(slog.NewTextHandler(discard{}, nil))))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// A transport that completes a command twice must not give its master two
// votes: one master granting (twice) and two refusing is no quorum of
// three. The collector counted every reply on the round's channel, so the
// second completion of master 0's SET made a quorum of one master.
func TestSeam_completeTwiceIsOneVote(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, ordered := range []bool{true, false} {
		t.Run(map[bool]string{true: "ordered", false: "notOrdered"}[ordered], func(t *testing.T) {
			c := seamClient(t,
				&seamFake{addr: "twice:1", mode: seamTwice, ordered: ordered, answer: grant},
				&seamFake{addr: "no:2", mode: seamAsync, ordered: ordered, answer: refuse},
				&seamFake{addr: "no:3", mode: seamAsync, ordered: ordered, answer: refuse},
			)
			defer c.Close()
			l, err := c.TryAcquire(context.Background(), "k", redlock.WithTTL(time.Second))
			if err == nil {
				t.Fatalf("granted with one master of three (it completed twice): until %v", l.Until())
			}
			if !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("err = %v, want ErrNotAcquired", err)
			}
		})
	}
}

// The same on release: a master that completes a release twice while the
// two others fail it must not make the release a success.
func TestSeam_completeTwiceNeitherPanicsNorLeaks(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, ordered := range []bool{true, false} {
		t.Run(map[bool]string{true: "ordered", false: "notOrdered"}[ordered], func(t *testing.T) {
			all := []*seamFake{
				{addr: "twice:1", mode: seamTwice, ordered: ordered, answer: grant},
				{addr: "twice:2", mode: seamTwice, ordered: ordered, answer: grant},
				{addr: "twice:3", mode: seamTwice, ordered: ordered, answer: grant},
			}
			c := seamClient(t, all...)
			for i := 0; i < 20; i++ {
				l, err := c.TryAcquire(context.Background(), "k", redlock.WithTTL(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Extend(context.Background(), time.Second); err != nil {
					t.Fatal(err)
				}
				if err := l.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			closeWithin(t, c, 2*time.Second)
		})
	}
}

// closeWithin fails the test when c.Close does not return within d.
func closeWithin(t *testing.T, c *redlock.Client, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		c.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("Close did not return within %v", d)
	}
}

// Replies that do not fit the command are never votes, whatever shape
// they take.
func TestSeam_misfitRepliesAreNoVotes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	misfits := []any{int64(1), []byte("OK"), "QUEUED", "ok", []any{"OK"}, int64(-1), "", true, 1}
	for _, bad := range misfits {
		bad := bad
		answer := func(cmd *redlock.Command) (any, error) {
			if cmd.Script == nil {
				return bad, nil
			}
			return int64(1), nil
		}
		for _, mode := range []seamMode{seamSync, seamAsync} {
			c := seamClient(t,
				&seamFake{addr: "a:1", mode: mode, answer: answer},
				&seamFake{addr: "a:2", mode: mode, answer: answer},
				&seamFake{addr: "a:3", mode: mode, answer: grant},
			)
			if l, err := c.TryAcquire(context.Background(), "k", redlock.WithTTL(time.Second)); err == nil {
				t.Errorf("SET answered %#v counted as a grant (until %v)", bad, l.Until())
			}
			closeWithin(t, c, 2*time.Second)
		}
	}
	// A script's reply of the wrong shape (a status) is no release either.
	for _, bad := range []any{"OK", []byte("1"), int64(2), nil} {
		bad := bad
		answer := func(cmd *redlock.Command) (any, error) {
			if cmd.Script == nil {
				return "OK", nil
			}
			return bad, nil
		}
		c := seamClient(t,
			&seamFake{addr: "a:1", mode: seamSync, answer: answer},
			&seamFake{addr: "a:2", mode: seamSync, answer: answer},
			&seamFake{addr: "a:3", mode: seamSync, answer: grant},
		)
		l, err := c.TryAcquire(context.Background(), "k", redlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(context.Background()); err == nil {
			t.Errorf("release answered %#v by two masters of three counted as released", bad)
		}
		closeWithin(t, c, 2*time.Second)
	}
}

// A transport that never completes: a call returns at its per-master
// timeout, and Close returns (its transport's Close completes what it
// held).
func TestSeam_neverCompletes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, ordered := range []bool{true, false} {
		f := []*seamFake{
			{addr: "hung:1", mode: seamNever, ordered: ordered, answer: grant},
			{addr: "hung:2", mode: seamNever, ordered: ordered, answer: grant},
			{addr: "ok:3", mode: seamAsync, ordered: ordered, answer: grant},
		}
		c := seamClient(t, f...)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		_, err := c.Acquire(ctx, "k", redlock.WithTTL(time.Second), redlock.WithWait(300*time.Millisecond))
		cancel()
		if err == nil {
			t.Fatal("granted by one master of three")
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("ordered=%v: Acquire with a 300ms wait returned after %v", ordered, el)
		}
		closeWithin(t, c, 2*time.Second)
	}
}

// A transport that breaks its contract by not completing even at Close
// must not hang Client.Close for ever: Close is documented to be bounded
// (one per-master timeout for what is in flight).
//
// OPEN DEFECT (issue 15's note): Client.Close waits without a bound for
// the workers after Transport.Close, so this test hangs today. The fix is
// for the Client to complete what a transport left unanswered after its
// Close plus one per-master timeout (a late completion is then ignored).
// It is skipped, not deleted, so that the fix has its test waiting.
func TestSeam_closeBoundedWhenTransportNeverCompletes(t *testing.T) {
	t.Skip("open defect: Close is unbounded when a transport breaks its contract and never completes (see the comment)")
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := seamClient(t,
		&seamFake{addr: "hung:1", mode: seamNeverEvenAtClose, answer: grant},
		&seamFake{addr: "ok:2", mode: seamAsync, answer: grant},
		&seamFake{addr: "ok:3", mode: seamAsync, answer: grant},
	)
	l, err := c.TryAcquire(context.Background(), "k", redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(context.Background())
	closeWithin(t, c, 2*time.Second)
}

// A transport that completes inside Send, on a path where every release
// fails (so the finisher retries them, sending under its gate), with
// reentrant owners whose rounds supersede those retries: nothing
// deadlocks and Close is bounded.
func TestSeam_syncCompletionUnderFinisherRetries(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, ordered := range []bool{true, false} {
		failRelease := func(cmd *redlock.Command) (any, error) {
			if cmd.Script != nil && (cmd.Script.Name() == "release" || cmd.Script.Name() == "reentrant" && cmd.MayRunLate) {
				return nil, redlock.ReplyError("ERR busy")
			}
			return grant(cmd)
		}
		f := []*seamFake{
			{addr: "s:1", mode: seamSync, ordered: ordered, answer: failRelease},
			{addr: "s:2", mode: seamSync, ordered: ordered, answer: failRelease},
			{addr: "s:3", mode: seamSync, ordered: ordered, answer: grant},
		}
		c := seamClient(t, f...)
		redlock.SetFinishBackoff(c, time.Millisecond, 2*time.Millisecond)
		done := make(chan struct{})
		go func() {
			defer close(done)
			var wg sync.WaitGroup
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					re, err := c.NewReentrant("rk", "owner"+string(rune('a'+g%2)), redlock.WithTTL(time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					for i := 0; i < 30; i++ {
						ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
						if l, err := c.TryAcquire(ctx, "k"+string(rune('a'+g)), redlock.WithTTL(time.Second)); err == nil {
							_ = l.Release(ctx)
						}
						if re.Acquire(ctx) == nil {
							if re.Acquire(ctx) == nil {
								_ = re.Release(ctx)
							}
							_ = re.Release(ctx)
						}
						cancel()
					}
				}(g)
			}
			wg.Wait()
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("ordered=%v: calls on a transport that completes inside Send did not finish (deadlock?)", ordered)
		}
		closeWithin(t, c, 2*time.Second)
	}
}

// Addr is taken as the transport gives it: one that spells the same
// master in other case is rejected; one whose Addr carries credentials
// must not see them in an error.
func TestSeam_addrs(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	_, err := redlock.NewWithTransports([]redlock.Transport{
		&seamFake{addr: "LocalHost:6379", answer: grant},
		&seamFake{addr: "localhost:6379", answer: grant},
		&seamFake{addr: "other:6379", answer: grant},
	})
	if !errors.Is(err, redlock.ErrInvalid) {
		t.Fatalf("the same master in two cases: err = %v, want ErrInvalid", err)
	}
	_, err = redlock.NewWithTransports([]redlock.Transport{
		&seamFake{addr: "redis://user:pw@127.0.0.1:7001", answer: grant},
		&seamFake{addr: "redis://127.0.0.1:7001", answer: grant},
		&seamFake{addr: "other:6379", answer: grant},
	})
	if !errors.Is(err, redlock.ErrInvalid) || strings.Contains(err.Error(), "pw") {
		t.Fatalf("the same master with and without credentials: err = %v, want ErrInvalid without the password", err)
	}
	hung := &seamFake{addr: "redis://user:hunter2@127.0.0.1:7001", mode: seamSync, answer: func(*redlock.Command) (any, error) {
		return nil, errors.New("boom")
	}}
	c := seamClient(t, hung,
		&seamFake{addr: "127.0.0.1:7002", mode: seamSync, answer: refuse},
		&seamFake{addr: "127.0.0.1:7003", mode: seamSync, answer: refuse})
	defer c.Close()
	_, err = c.TryAcquire(context.Background(), "k", redlock.WithTTL(time.Second))
	if err == nil {
		t.Fatal("granted")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error shows the password of a transport's Addr: %v", err)
	}
}
