package redlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/redlock"
)

// doneAfterClose fails t unless c's Done is open, Close closes it, and a
// second and third Close (one concurrent with another) neither panic nor
// fail.
func doneAfterClose(t *testing.T, c *redlock.Client) {
	t.Helper()
	d := c.Done()
	if d == nil {
		t.Fatal("Done is nil on a client a constructor made")
	}
	select {
	case <-d:
		t.Fatal("Done closed before Close")
	default:
	}
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() { errs <- c.Close() }()
	}
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Errorf("Close %d: %v", i, err)
		}
	}
	select {
	case <-d:
	default:
		t.Fatal("Done not closed after Close")
	}
	if c.Done() != d {
		t.Error("Done returned another channel after Close")
	}
}

// Done of a client made by NewFromAddrs behaves as New's: open, then
// closed by Close, which may be called again and concurrently.
func TestClient_doneOfNewFromAddrsClosesAtClose(t *testing.T) {
	rs := startReal(t, 3)
	addrs := make([]string, len(rs.servers))
	for i, s := range rs.servers {
		addrs[i] = s.Addr()
	}
	forEachPath(t, func(t *testing.T, path connPath) {
		doneAfterClose(t, addrClient(t, path, addrs))
	})
}

// A Client no constructor made (the zero value, a nil pointer) has a nil
// Done; its Close fails with ErrInvalid and closes nothing; an Election of
// it (the zero Election) observes nothing: its channel is closed at once.
func TestClient_doneOfAClientNoConstructorMadeIsNil(t *testing.T) {
	var zero redlock.Client
	var nilClient *redlock.Client
	for name, c := range map[string]*redlock.Client{"zero": &zero, "nil": nilClient} {
		if c.Done() != nil {
			t.Errorf("%s: Done is not nil", name)
		}
		if err := c.Close(); !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("%s: Close: %v, want ErrInvalid", name, err)
		}
		if c.Done() != nil {
			t.Errorf("%s: Done is not nil after Close", name)
		}
		if _, err := c.Inspect(context.Background(), "k"); !errors.Is(err, redlock.ErrInvalid) {
			t.Errorf("%s: Inspect: %v, want ErrInvalid", name, err)
		}
	}
	var e election.Election
	if _, ok := <-e.Observe(context.Background()); ok {
		t.Error("the zero Election observed a leader")
	}
	if _, err := e.Leader(context.Background()); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("the zero Election's Leader: %v, want ErrInvalid", err)
	}
}
