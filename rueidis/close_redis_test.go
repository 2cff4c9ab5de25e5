package rueidis

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	lib "github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// Close with a SIGSTOPped master, a waiter subscribed and commands in
// flight returns within a bound, fails what is pending with ErrClosed,
// and leaves no goroutine of the transport's behind once the rueidis
// client is closed too.
func TestClose_stoppedMasterLeavesNoGoroutine(t *testing.T) {
	s := redistest.StartOne(t)
	before := goleak.IgnoreCurrent()
	// A subscription being opened on the stopped master holds Close until
	// rueidis gives up the dial: its Dialer's Timeout.
	const dial = time.Second
	rc, err := lib.NewClient(lib.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true,
		Dialer: net.Dialer{Timeout: dial}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New([]lib.Client{rc}, redlock.WithTimeout(lockTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	if _, err := c.Acquire(ctx, "held", redlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "held", redlock.WithWait(time.Minute))
		waiting <- err
	}()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	tries := make(chan error, 4)
	for i := 0; i < cap(tries); i++ {
		go func() {
			_, err := c.TryAcquire(ctx, "frozen")
			tries <- err
		}()
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > dial+3*time.Second {
		t.Errorf("Close took %v with a stopped master", took)
	}
	if err := <-waiting; !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("the waiter: %v, want ErrClosed", err)
	}
	for i := 0; i < cap(tries); i++ {
		if err := <-tries; err == nil {
			t.Error("a lock granted by a stopped master")
		}
	}
	rc.Close()
	goleak.VerifyNone(t, before)
}

// A command sent to a closed transport fails with ErrClosed, unsent.
func TestTransport_sendAfterCloseFailsUnsent(t *testing.T) {
	ms := startMasters(t, 1)
	tr := NewTransport(ms.clients[0])
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	tr.Send(&transport.Command{Name: "SET", Args: []any{"k", "v", "NX", "PX", int64(1000)}, Reply: transport.ReplySet,
		Done: func(_ any, err error, info transport.SendInfo) {
			if info.Sent {
				err = errors.New("reported sent")
			}
			got <- err
		}})
	if err := <-got; !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("Send after Close: %v, want ErrClosed", err)
	}
	if _, err := tr.Subscribe(context.Background(), func(string, string) {}); !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("Subscribe after Close: %v, want ErrClosed", err)
	}
}
