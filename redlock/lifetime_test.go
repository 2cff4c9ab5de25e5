package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

func TestLock_autoExtendKeepsTheLockThroughManyTTLs(t *testing.T) {
	fs := newFakes(t, 3)
	start := fs.clk.Now()
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL), redlock.WithAutoExtend(0))
	if err != nil {
		t.Fatal(err)
	}
	// The watchdog's timer fires at a third of the TTL, each time.
	for fs.clk.Since(start) < 5*fakeTTL {
		d := <-fs.backoffs
		if d != fakeTTL/3 {
			t.Fatalf("watchdog waits %v, want a third of the TTL (%v)", d, fakeTTL/3)
		}
		fs.clk.Advance(d)
		fs.waitCalls(t, "extend", int(fs.clk.Since(start)/(fakeTTL/3)))
	}
	select {
	case <-l.Lost():
		t.Fatalf("lost after %v: %v", fs.clk.Since(start), l.Err())
	default:
	}
	for i, m := range fs.masters {
		if v, _ := m.Get("k"); v != l.Token() {
			t.Errorf("master %d lost the key after 5 TTLs", i)
		}
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-l.Lost()
	if !errors.Is(l.Err(), redlock.ErrReleased) || !errors.Is(l.Err(), redlock.ErrLockLost) {
		t.Errorf("Err after Release = %v", l.Err())
	}
}

func TestLock_autoExtendLosesWhenAQuorumRefuses(t *testing.T) {
	fs := newFakes(t, 3)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL), redlock.WithAutoExtend(0))
	if err != nil {
		t.Fatal(err)
	}
	fs.waitCalls(t, "SET", 1)
	fs.masters[0].Set("k", "other", time.Minute)
	fs.masters[1].Set("k", "other", time.Minute)
	fs.clk.Advance(<-fs.backoffs)
	<-l.Lost()
	if !errors.Is(l.Err(), redlock.ErrLockLost) {
		t.Fatalf("Err = %v", l.Err())
	}
	var qe *redlock.QuorumError
	if !errors.As(l.Err(), &qe) || len(qe.Refused) < 2 {
		t.Errorf("Err does not say which masters refused: %v", l.Err())
	}
	if err := l.Release(context.Background()); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("Release of a lost lock = %v", err)
	}
}

func TestLock_autoExtendLosesAfterBoundedRetries(t *testing.T) {
	fs := newFakes(t, 3)
	start := fs.clk.Now()
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL), redlock.WithAutoExtend(0))
	if err != nil {
		t.Fatal(err)
	}
	fs.masters[1].SetDown(true)
	fs.masters[2].SetDown(true)
	until := l.Until() // failed extensions to the same TTL leave it
	for {
		select {
		case <-l.Lost():
			if !errors.Is(l.Err(), redlock.ErrLockLost) || !strings.Contains(l.Err().Error(), "3 extensions in a row") {
				t.Fatalf("Err = %v", l.Err())
			}
			// The first extension at a third of the TTL and two retries a
			// quarter period apart: lost long before the validity ends.
			period := fakeTTL / 3
			if el, want := fs.clk.Since(start), period+2*(period/4); el != want {
				t.Errorf("lost after %v, want %v", el, want)
			}
			if !fs.clk.Now().Before(until) {
				t.Error("lost only when the validity ran out")
			}
			if l.Until().After(fs.clk.Now()) {
				t.Errorf("Until is %v ahead after the loss", l.Until().Sub(fs.clk.Now()))
			}
			return
		case d := <-fs.backoffs:
			fs.clk.Advance(d)
		case <-time.After(10 * time.Second):
			t.Fatal("the lock was never reported lost")
		}
	}
}

func TestLock_Lost_closesAtValidityEndWithoutAutoExtend(t *testing.T) {
	fs := newFakes(t, 1)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	lost := l.Lost()
	select {
	case <-lost:
		t.Fatal("lost at once")
	default:
	}
	if l.Err() != nil {
		t.Fatalf("Err before loss = %v", l.Err())
	}
	d := <-fs.backoffs
	if want := l.Until().Sub(fs.clk.Now()); d != want {
		t.Errorf("timer of %v, want the validity %v", d, want)
	}
	fs.clk.Advance(d)
	<-lost
	if !errors.Is(l.Err(), redlock.ErrLockLost) || !strings.Contains(l.Err().Error(), "validity ran out") {
		t.Errorf("Err = %v", l.Err())
	}
}

func TestLock_maxHoldStopsExtending(t *testing.T) {
	fs := newFakes(t, 3)
	start := fs.clk.Now()
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL),
		redlock.WithAutoExtend(0), redlock.WithMaxHold(2*fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case <-l.Lost():
			if !errors.Is(l.Err(), redlock.ErrMaxHold) || !errors.Is(l.Err(), redlock.ErrLockLost) {
				t.Fatalf("Err = %v", l.Err())
			}
			if el := fs.clk.Since(start); el != 2*fakeTTL {
				t.Errorf("lost after %v, want the max hold %v", el, 2*fakeTTL)
			}
			return
		case d := <-fs.backoffs:
			fs.clk.Advance(d)
		case <-time.After(10 * time.Second):
			t.Fatal("the lock was kept past its max hold")
		}
	}
}

func TestClient_Do_cancelsFnWhenLockIsLost(t *testing.T) {
	fs := newFakes(t, 3)
	running := make(chan struct{})
	res := async(func() error {
		return fs.client.Do(context.Background(), "k", func(ctx context.Context) error {
			close(running)
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), redlock.ErrLockLost) {
				t.Errorf("fn's ctx cause = %v", context.Cause(ctx))
			}
			return errors.New("fn stopped")
		}, redlock.WithTTL(fakeTTL))
	})
	<-running
	fs.waitCalls(t, "SET", 1)
	for _, m := range fs.masters {
		m.Set("k", "other", time.Minute)
	}
	err := driveBackoff(t, fs, res)
	if !errors.Is(err, redlock.ErrLockLost) || !strings.Contains(err.Error(), "fn stopped") {
		t.Fatalf("Do = %v, want fn's error joined with the loss", err)
	}
	for i, m := range fs.masters {
		if v, _ := m.Get("k"); v != "other" {
			t.Errorf("master %d: Do's release touched the new holder's key", i)
		}
	}
}

func TestClient_Do_releasesAfterFnAndOnPanic(t *testing.T) {
	fs := newFakes(t, 3)
	err := fs.client.Do(context.Background(), "k", func(ctx context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	fs.waitCalls(t, "release", 1)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the fn's panic", r)
			}
		}()
		_ = fs.client.Do(context.Background(), "k", func(ctx context.Context) error { panic("boom") })
	}()
	fs.waitCalls(t, "release", 2)
	fs.closeAndCheckNoKey(t, "k", "")
}

func TestClient_Do_acquireFailureSkipsFn(t *testing.T) {
	fs := newFakes(t, 1)
	fs.masters[0].Set("k", "other", time.Hour)
	ran := false
	err := fs.client.Do(context.Background(), "k", func(ctx context.Context) error { ran = true; return nil },
		redlock.WithWait(0))
	if !errors.Is(err, redlock.ErrNotAcquired) || ran {
		t.Fatalf("Do = %v, fn ran: %v", err, ran)
	}
}

func TestClient_Close_stopsWatchdogs(t *testing.T) {
	fs := newFakes(t, 1)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL), redlock.WithAutoExtend(0))
	if err != nil {
		t.Fatal(err)
	}
	fs.client.Close()
	<-l.Lost()
	if !errors.Is(l.Err(), redlock.ErrClosed) || !errors.Is(l.Err(), redlock.ErrLockLost) {
		t.Errorf("Err after Close = %v", l.Err())
	}
}

func TestWithAutoExtend_rejectsPeriodsThatComeTooLate(t *testing.T) {
	fs := newFakes(t, 1)
	for _, p := range []time.Duration{-time.Second, fakeTTL, fakeTTL - fakeTimeout} {
		_, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL), redlock.WithAutoExtend(p))
		if !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("period %v: %v, want ErrInvalid", p, err)
		}
	}
	if _, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithMaxHold(-1)); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("negative max hold: %v", err)
	}
}
