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

	"github.com/quorumlock/quorumlock/internal/redistest"
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

func (f *seamFake) Subscribe(context.Context, func(string, string)) (redlock.Subscription, error) {
	return nil, errors.New("seamFake: no subscriptions")
}

func (f *seamFake) Close() error {
	f.mu.Lock()
	f.closed = true
	if f.mode == seamNeverEvenAtClose {
		f.mu.Unlock() // keeps what it holds, unanswered
		f.wg.Wait()
		return nil
	}
	held := f.held
	f.held = nil
	f.mu.Unlock()
	for _, c := range held {
		c.Complete(nil, redlock.ErrClosed, redlock.SendInfo{Sent: true})
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
// must not hang Client.Close for ever: Close is documented to be bounded.
// The client completes, itself, what is still unanswered one per-master
// timeout after it closed the transports, and ignores a late completion;
// no goroutine outlives Close. A failed acquisition's rollback to the hung
// master, and a release chained behind its unanswered SET, are held too.
func TestSeam_closeBoundedWhenTransportNeverCompletes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, ordered := range []bool{true, false} {
		t.Run(map[bool]string{true: "ordered", false: "notOrdered"}[ordered], func(t *testing.T) {
			hung := &seamFake{addr: "hung:1", mode: seamNeverEvenAtClose, ordered: ordered, answer: grant}
			c := seamClient(t,
				hung,
				&seamFake{addr: "ok:2", mode: seamAsync, ordered: ordered, answer: grant},
				&seamFake{addr: "ok:3", mode: seamAsync, ordered: ordered, answer: grant},
			)
			l, err := c.TryAcquire(context.Background(), "k", redlock.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Release(context.Background())
			// An attempt that fails (the others refuse) sends a rollback to
			// the hung master, which it holds too.
			c2 := seamClient(t,
				hung,
				&seamFake{addr: "no:2", mode: seamAsync, ordered: ordered, answer: refuse},
				&seamFake{addr: "no:3", mode: seamAsync, ordered: ordered, answer: refuse},
			)
			if _, err := c2.TryAcquire(context.Background(), "k2", redlock.WithTTL(time.Second)); err == nil {
				t.Fatal("granted by one master of three")
			}
			start := time.Now()
			closeWithin(t, c, 2*time.Second)
			t.Logf("Close took %v (per-master timeout 50ms)", time.Since(start))
			closeWithin(t, c2, 2*time.Second)
			// The transport completes late: ignored, no panic, no vote.
			hung.mu.Lock()
			held := hung.held
			hung.held = nil
			hung.mu.Unlock()
			if len(held) == 0 {
				t.Fatal("the hung transport held no command: the test tests nothing")
			}
			for _, cmd := range held {
				cmd.Complete(nil, redlock.ErrClosed, redlock.SendInfo{Sent: true})
			}
		})
	}
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

// Every command a Client sends carries a Deadline one per-master timeout
// from its send, on an Ordered transport as on another, so that an adapter
// can bound it: acquisitions, extensions, releases, rollbacks, fence
// commits and the finisher's retries alike.
func TestSeam_everyCommandCarriesADeadline(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const timeout = 50 * time.Millisecond // seamClient's
	for _, ordered := range []bool{true, false} {
		t.Run(map[bool]string{true: "ordered", false: "notOrdered"}[ordered], func(t *testing.T) {
			var mu sync.Mutex
			var bad []string
			seen := map[string]int{}
			var releaseWait time.Duration // a release waits longer (stall.Bound.ReleaseWait): set once the client is made
			record := func(addr string, answer func(*redlock.Command) (any, error)) func(*redlock.Command) (any, error) {
				return func(cmd *redlock.Command) (any, error) {
					left := time.Until(cmd.Deadline)
					name := cmd.Name
					if cmd.Script != nil {
						name = cmd.Script.Name()
					}
					mu.Lock()
					seen[name]++
					seen[addr+" "+name]++
					bound := timeout
					if name == "release" {
						bound = releaseWait
					}
					if cmd.Deadline.IsZero() || left <= 0 || left > bound {
						bad = append(bad, name+": deadline "+cmd.Deadline.String()+", "+left.String()+" from its send")
					}
					mu.Unlock()
					return answer(cmd)
				}
			}
			fencedGrant := func(cmd *redlock.Command) (any, error) {
				if cmd.Script != nil && cmd.Script.Name() == "fenced_acquire" {
					return []byte("7"), nil // the fencing counter
				}
				return grant(cmd)
			}
			failRelease := func(cmd *redlock.Command) (any, error) {
				if cmd.Script != nil && cmd.Script.Name() == "release" {
					return nil, redlock.ReplyError("ERR busy") // the finisher retries it
				}
				return fencedGrant(cmd)
			}
			c := seamClient(t,
				&seamFake{addr: "d:1", mode: seamSync, ordered: ordered, answer: record("d:1", fencedGrant)},
				&seamFake{addr: "d:2", mode: seamSync, ordered: ordered, answer: record("d:2", failRelease)},
				&seamFake{addr: "d:3", mode: seamSync, ordered: ordered, answer: record("d:3", fencedGrant)},
			)
			t.Cleanup(func() { c.Close() })
			mu.Lock()
			releaseWait = redlock.ReleaseWait(c)
			mu.Unlock()
			redlock.SetFinishBackoff(c, time.Millisecond, 2*time.Millisecond)
			ctx := context.Background()
			l, err := c.TryAcquire(ctx, "k", redlock.WithTTL(time.Second), redlock.WithFencing())
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Extend(ctx, time.Second); err != nil {
				t.Fatal(err)
			}
			_ = l.Release(ctx)
			// Two masters of three refuse: a failed attempt, rolled back
			// where it was granted.
			c2 := seamClient(t,
				&seamFake{addr: "e:1", mode: seamAsync, ordered: ordered, answer: record("e:1", grant)},
				&seamFake{addr: "e:2", mode: seamAsync, ordered: ordered, answer: record("e:2", refuse)},
				&seamFake{addr: "e:3", mode: seamAsync, ordered: ordered, answer: record("e:3", refuse)},
			)
			t.Cleanup(func() { c2.Close() })
			if _, err := c2.TryAcquire(ctx, "k2", redlock.WithTTL(time.Second)); err == nil {
				t.Fatal("granted by one master of three")
			}
			// Wait for a retry of the release master 2 failed.
			redistest.Within(2*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return seen["d:2 release"]+seen["e:1 release"] >= 3
			})
			closeWithin(t, c, 2*time.Second)
			closeWithin(t, c2, 2*time.Second)
			mu.Lock()
			defer mu.Unlock()
			for _, want := range []string{"SET", "fenced_acquire", "fence_commit", "extend", "release"} {
				if seen[want] == 0 {
					t.Errorf("no %s sent (sent: %v): the test misses it", want, seen)
				}
			}
			if seen["d:2 release"] < 2 {
				t.Errorf("release sent %d times to d:2: want once and a retry (sent: %v)", seen["d:2 release"], seen)
			}
			if seen["e:1 release"] == 0 {
				t.Errorf("no rollback on e:1 (sent: %v)", seen)
			}
			for _, b := range bad {
				t.Error(b)
			}
		})
	}
}
