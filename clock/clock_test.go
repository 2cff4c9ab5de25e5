package clock_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFake_Advance_firesDueTimersInOrder(t *testing.T) {
	start := time.Unix(1000, 0)
	f := clock.NewFake(start)
	late := f.NewTimer(3 * time.Second)
	early := f.NewTimer(time.Second)
	never := f.NewTimer(time.Hour)
	if got := f.Pending(); got != 3 {
		t.Fatalf("Pending = %d, want 3", got)
	}

	f.Advance(2 * time.Second)
	select {
	case at := <-early.C():
		if !at.Equal(start.Add(time.Second)) {
			t.Errorf("early fired with %v, want %v", at, start.Add(time.Second))
		}
	default:
		t.Fatal("early timer did not fire")
	}
	select {
	case <-late.C():
		t.Fatal("late timer fired too soon")
	default:
	}

	f.Advance(time.Second)
	<-late.C()
	if !never.Stop() {
		t.Error("Stop of a pending timer returned false")
	}
	if never.Stop() {
		t.Error("second Stop returned true")
	}
	if got := f.Pending(); got != 0 {
		t.Errorf("Pending = %d, want 0", got)
	}
	if got := f.Since(start); got != 3*time.Second {
		t.Errorf("Since = %v, want 3s", got)
	}
}

func TestFake_NewTimer_nonPositiveFiresAtOnce(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	select {
	case <-f.NewTimer(0).C():
	default:
		t.Fatal("zero timer did not fire at once")
	}
}

func TestFake_BlockUntil(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	done := make(chan struct{})
	go func() {
		defer close(done)
		tm := f.NewTimer(time.Minute)
		<-tm.C()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.BlockUntil(ctx, 1); err != nil {
		t.Fatal(err)
	}
	f.Advance(time.Minute)
	<-done

	short, cancelShort := context.WithCancel(context.Background())
	cancelShort()
	if err := f.BlockUntil(short, 5); err != context.Canceled {
		t.Fatalf("BlockUntil on cancelled ctx = %v, want context.Canceled", err)
	}
}

func TestReal_monotonic(t *testing.T) {
	c := clock.Real()
	a := c.Now()
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
	if d := c.Since(a); d < time.Millisecond {
		t.Fatalf("Since = %v after a 1ms timer", d)
	}
	if tm.Stop() {
		t.Error("Stop after firing returned true")
	}
}
