package rueidis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/transport"
)

// laneOutcome is what a command's Complete received.
type laneOutcome struct {
	v    any
	err  error
	info transport.SendInfo
}

// laneSET sends a SET of key with deadline d from now and grace to l, and
// returns where its outcome goes.
func laneSET(l *lane, key string, d, grace time.Duration) chan laneOutcome {
	ch := make(chan laneOutcome, 1)
	l.send(&transport.Command{Name: "SET", Args: []any{key, "1", "PX", "10000"}, Reply: transport.ReplySet,
		Deadline: time.Now().Add(d), Grace: grace,
		Done: func(v any, err error, info transport.SendInfo) { ch <- laneOutcome{v, err, info} }})
	return ch
}

// slowSetLane returns a lane to a master that holds every SET for delay
// (slowSetClients), its connection made by a first SET.
func slowSetLane(t *testing.T, delay time.Duration) *lane {
	t.Helper()
	l := newLane(slowSetClients(t, 1, delay)[0], "slow")
	t.Cleanup(l.close)
	if o := <-laneSET(l, "warm", 5*time.Second, 0); o.err != nil {
		t.Fatalf("warm-up: %+v", o)
	}
	return l
}

// A command queued behind a batch that a slow master answers late, and
// queued while that batch had been silent for less than the command's
// wait, is sent when the batch returns and its reply delivered, late: the
// master is slow, not down, and a late answer is how the Client learns
// that the host is slow (its adaptive bound). It used to fail, unsent,
// once the writer found it past its deadline.
func TestLane_queuedBehindASlowMasterIsSentLate(t *testing.T) {
	l := slowSetLane(t, 200*time.Millisecond)
	first := laneSET(l, "first", 5*time.Second, 0)
	if !redistest.Within(2*time.Second, func() bool { return l.silence() > 0 }) {
		t.Fatal("the first SET's batch was never sent")
	}
	start := time.Now()
	const budget = 80 * time.Millisecond
	queued := laneSET(l, "queued", budget, 50*time.Millisecond)
	if s := l.silence(); s >= budget {
		t.Skipf("the batch ahead was silent for %v when the command was queued: the machine is too loaded to tell", s)
	}
	if o := <-first; o.err != nil || o.v != "OK" {
		t.Fatalf("the first SET: %+v, want OK", o)
	}
	o := <-queued
	if o.err != nil || o.v != "OK" || !o.info.Sent {
		t.Fatalf("a command queued behind a slow master's batch, %v after its queueing: %+v, want OK, sent late", time.Since(start), o)
	}
	if el := time.Since(start); el < budget {
		t.Fatalf("answered after %v, within its deadline: the case this test checks did not occur", el)
	}
}

// A command queued behind a batch that has been silent for longer than
// the command's wait (and its grace) is queued behind a master taken for
// hung: past one grace after its deadline it fails, unsent, as a timeout,
// when the writer takes it.
func TestLane_queuedBehindAHungMasterGetsItsGrace(t *testing.T) {
	l := slowSetLane(t, 500*time.Millisecond)
	first := laneSET(l, "first", 5*time.Second, 0)
	const budget, grace = 50 * time.Millisecond, 50 * time.Millisecond
	if !redistest.Within(2*time.Second, func() bool { return l.silence() > 3*budget }) {
		t.Fatal("the batch was never silent for longer than the command's wait")
	}
	queued := laneSET(l, "queued", budget, grace)
	if o := <-first; o.err != nil || o.v != "OK" {
		t.Fatalf("the first SET: %+v, want OK", o)
	}
	if o := <-queued; !errors.Is(o.err, context.DeadlineExceeded) || o.info.Sent {
		t.Fatalf("a command queued behind a master silent beyond its wait: %+v, want a timeout, unsent", o)
	}
}

// A command that undoes one queued ahead of it (a rollback behind its
// SET), or that is not worthless late (a release behind an extension), is
// sent after it, also when that command is kept past its deadline (the
// master was slow, not hung, when it was queued) and the later one was
// queued once the batch ahead had been silent for longer than its own
// wait: failed first, unsent, it left the command ahead to run on its
// own, late, and its grant on the master.
func TestLane_undoBehindAKeptCommandIsSentAfterIt(t *testing.T) {
	for _, undo := range []bool{true, false} {
		name := map[bool]string{true: "rollback", false: "release"}[undo]
		t.Run(name, func(t *testing.T) {
			l := slowSetLane(t, 400*time.Millisecond)
			first := laneSET(l, "first", 5*time.Second, 0)
			if !redistest.Within(2*time.Second, func() bool { return l.silence() > 0 }) {
				t.Fatal("the first SET's batch was never sent")
			}
			const budget = 80 * time.Millisecond
			set := laneSET(l, "undo:k", budget, 50*time.Millisecond)
			if s := l.silence(); s >= budget {
				t.Skipf("the batch ahead was silent for %v when the SET was queued: the machine is too loaded to tell", s)
			}
			if !redistest.Within(2*time.Second, func() bool { return l.silence() > 150*time.Millisecond }) {
				t.Fatal("the batch ahead was never silent for 150 ms")
			}
			after := make(chan laneOutcome, 1)
			l.send(&transport.Command{Name: "DEL", Args: []any{"undo:k"}, Reply: transport.ReplyFlag,
				Deadline: time.Now().Add(30 * time.Millisecond), Grace: 30 * time.Millisecond, Undo: undo,
				Done: func(v any, err error, info transport.SendInfo) { after <- laneOutcome{v, err, info} }})
			// The first SET is completed before the writer takes the
			// next batch: not completed yet, the SET and the command
			// after it go in one batch.
			select {
			case o := <-first:
				t.Skipf("the batch ahead returned (%+v) before the %s was queued: the machine is too loaded to tell", o, name)
			default:
			}
			if o := <-first; o.err != nil {
				t.Fatalf("the first SET: %+v", o)
			}
			s, u := <-set, <-after
			if s.err != nil || !s.info.Sent {
				t.Skipf("the SET was not sent late (%+v): the case this test checks did not occur", s)
			}
			if u.err != nil || !u.info.Sent || u.v != int64(1) {
				t.Errorf("the %s queued behind a SET sent late: %+v, want sent after it, deleting its key", name, u)
			}
			if errors.Is(u.err, timeoutError{}) && !u.info.Sent {
				n, err := l.client.Do(context.Background(), l.client.B().Exists().Key("undo:k").Build()).AsInt64()
				t.Logf("failed unsent, before the SET ahead of it was sent: the key exists on the master: %d (%v)", n, err)
			}
		})
	}
}
