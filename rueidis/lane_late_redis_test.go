package rueidis

import (
	"context"
	"errors"
	"testing"
	"time"

	lib "github.com/redis/rueidis"

	"github.com/quorumlock/quorumlock/internal/adaptertest"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// slowSetClients returns clients of n masters, each behind a proxy that
// holds every SET for delay (adaptertest.SlowSetProxies).
func slowSetClients(t *testing.T, n int, delay time.Duration) []lib.Client {
	t.Helper()
	var addrs []string
	for _, s := range redistest.Start(t, n) {
		addrs = append(addrs, s.Addr())
	}
	var clients []lib.Client
	for _, a := range adaptertest.SlowSetProxies(t, addrs, delay) {
		clients = append(clients, dial(t, a, func(o *lib.ClientOption) { o.AlwaysRESP2 = true }))
	}
	return clients
}

// Every master answers an acquisition in 80 ms, past the 50 ms per-master
// timeout: the host is slow, no master is down. The first attempts fail
// (the Client has seen nothing yet), but their late answers reach it, so
// it learns to wait for them: from then on every attempt succeeds.
func TestClient_slowMastersAreWaitedFor(t *testing.T) {
	c := newClient(t, slowSetClients(t, 3, 80*time.Millisecond), redlock.WithTimeout(50*time.Millisecond))
	adaptertest.SlowMastersAreWaitedFor(t, c)
}

// A batch past its earliest deadline, on a master that holds each SET
// 150 ms, is not a master down for a command with more time than the
// batch has waited (the Client's adaptive bound gives later commands
// more): a command worthless late is still sent, and answered. Before,
// the lane failed it at Send, unsent, as soon as the batch was past its
// deadline, and so was one with less time than the batch had waited.
func TestLane_slowIsNotDown(t *testing.T) {
	l := newLane(slowSetClients(t, 1, 150*time.Millisecond)[0], "slow")
	t.Cleanup(l.close)
	type outcome struct {
		v    any
		err  error
		info transport.SendInfo
	}
	send := func(d time.Duration, key string) chan outcome {
		ch := make(chan outcome, 1)
		l.send(&transport.Command{Name: "SET", Args: []any{key, "1", "PX", "10000"}, Reply: transport.ReplySet,
			Deadline: time.Now().Add(d), DropWhenDown: true,
			Done: func(v any, err error, info transport.SendInfo) { ch <- outcome{v, err, info} }})
		return ch
	}
	warm := send(5*time.Second, "warm")
	if o := <-warm; o.err != nil {
		t.Fatalf("warm-up: %+v", o)
	}
	start := time.Now()
	first := send(30*time.Millisecond, "first")
	if !redistest.Within(2*time.Second, func() bool { return l.silence() > 40*time.Millisecond }) {
		t.Fatal("the first SET's batch never waited past its deadline")
	}
	if el := time.Since(start); el > 140*time.Millisecond {
		t.Skipf("the first SET was sent %v late: the machine is too loaded to tell", el)
	}
	// Less time than the batch has waited: still queued, not down (a
	// loaded host's batch is past a 50 ms deadline at every turn); it
	// fails at its deadline, unsent, once the batch returns.
	short := send(20*time.Millisecond, "short")
	later := send(2*time.Second, "later")
	if o := <-short; !errors.Is(o.err, context.DeadlineExceeded) || errors.Is(o.err, errDown) || o.info.Sent {
		t.Fatalf("a command with 20 ms behind a batch silent for 40 ms and more: %+v, want a timeout, unsent, not down", o)
	}
	if o := <-later; o.err != nil || o.v != "OK" {
		if errors.Is(o.err, errDown) {
			t.Fatalf("a command with 2 s behind a batch silent for %v failed as down: %+v", time.Since(start), o)
		}
		t.Fatalf("the later SET: %+v, want OK", o)
	}
	if o := <-first; o.err != nil || o.v != "OK" {
		t.Fatalf("the first SET, answered late: %+v, want OK delivered", o)
	}
}
