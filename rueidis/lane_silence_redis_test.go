package rueidis

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/transport"
)

// A batch in flight to a stopped master (SIGSTOP) is silent for as long
// as it waits, less what of that this process did not run: a stall of
// this process covering the whole wait so far leaves the master not
// silent for it, and the silence grows again from the stall's end, as a
// hung master's does.
func TestLane_silenceLeavesOutThisProcessStalls(t *testing.T) {
	s := redistest.StartOne(t)
	l := newLane(dial(t, s.Addr()), s.Addr())
	t.Cleanup(l.close)
	send := func(key string) <-chan error {
		ch := make(chan error, 1)
		l.send(&transport.Command{Name: "SET", Args: []any{key, "1", "PX", "10000"}, Reply: transport.ReplySet,
			Deadline: time.Now().Add(5 * time.Second),
			Done:     func(_ any, err error, _ transport.SendInfo) { ch <- err }})
		return ch
	}
	if err := <-send("lane:silence:warm"); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = s.Resume()
		}
	}()
	held := send("lane:silence:held")
	if !redistest.Within(5*time.Second, func() bool { return l.silence() >= 200*time.Millisecond }) {
		t.Fatalf("silence %v with a batch in flight to a stopped master", l.silence())
	}
	// A stall from when the batch was sent until now: the timer due then
	// fired only now.
	sent := time.Unix(0, l.flight.Load())
	l.stalls.Note(sent, time.Now())
	if sl := l.silence(); sl >= 100*time.Millisecond {
		t.Errorf("silence %v right after a stall of this process over the whole wait", sl)
	}
	if !redistest.Within(5*time.Second, func() bool { return l.silence() >= 100*time.Millisecond }) {
		t.Errorf("silence %v: a stopped master is not silent again after this process runs", l.silence())
	}
	resumed = true
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Errorf("the SET held by the stopped master: %v", err)
	}
}
