package redlock

import (
	"context"
	"sync"
	"testing"
	"time"
)

// heldTransport is a Transport that is not Ordered and answers nothing
// until the test completes a command: for the legs' bookkeeping, no Redis
// involved.
type heldTransport struct {
	addr string
	mu   sync.Mutex
	sent []*Command
}

func (h *heldTransport) Addr() string { return h.addr }
func (h *heldTransport) Send(cmd *Command) {
	h.mu.Lock()
	h.sent = append(h.sent, cmd)
	h.mu.Unlock()
}
func (h *heldTransport) Subscribe(context.Context, func(string, string)) (Subscription, error) {
	return nil, ErrClosed
}
func (h *heldTransport) Close() error {
	h.mu.Lock()
	sent := h.sent
	h.sent = nil
	h.mu.Unlock()
	for _, c := range sent {
		c.Complete(nil, ErrClosed, SendInfo{})
	}
	return nil
}

func (h *heldTransport) take(t *testing.T) *Command {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.sent) == 0 {
		t.Fatal("nothing was sent")
	}
	c := h.sent[0]
	h.sent = h.sent[1:]
	return c
}

// A fence commit's leg on a transport that is not Ordered waits for its
// acquisition's answer there; when it gives up at its deadline and the
// commit is decided afterwards, the leg still ends once — after the
// acquisition answered — not once at the decision and again then.
func TestLegs_gaveUpCommitLegEndsOnce(t *testing.T) {
	ht := &heldTransport{addr: "held:1"}
	c, err := NewWithTransports([]Transport{ht}, WithTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	acq, err := c.startRound(ctx, opAcquire, "k", "tok", time.Second, nil, plainKind{}, &fencing{counter: FenceKey("k")})
	if err != nil {
		t.Fatal(err)
	}
	set := ht.take(t)
	commit, err := c.startRound(ctx, opCommit, "k", "tok", time.Second, acq, plainKind{}, &fencing{counter: FenceKey("k"), arg: "1"})
	if err != nil {
		t.Fatal(err)
	}
	// The commit's leg gives up at its deadline: it reports a failure.
	select {
	case rp := <-commit.replies:
		if rp.vote != voteFail {
			t.Fatalf("commit leg: vote %v, want a failure", rp.vote)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the commit's leg did not give up at its deadline")
	}
	commit.decide(false)
	if got := commit.running.Load(); got != 1 {
		t.Fatalf("after the decision, %d legs of the commit still run, want 1 (it ends after the acquisition's answer)", got)
	}
	set.Complete(int64(0), nil, SendInfo{Sent: true}) // refused: no rollback
	acq.decide(true)
	if got := commit.running.Load(); got != 0 {
		t.Fatalf("%d legs of the commit still run, want 0", got)
	}
	if got := acq.running.Load(); got != 0 {
		t.Fatalf("%d legs of the acquisition still run, want 0", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// Every command a round builds names its script for a transport that
// does not read the redigo arguments: a fair fenced acquisition's script
// (FairAcquire's source with a fourth key) was missing, and such a
// transport sent EVALSHA without the hash.
func TestLegs_commandsNameTheirScript(t *testing.T) {
	ht := &heldTransport{addr: "held:1"}
	c, err := NewWithTransports([]Transport{ht}, WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fair := &fairness{waiter: "w", arrival: 1, entryTTLms: 1000, queue: "k:q", deadlines: "k:d"}
	fence := &fencing{counter: FenceKey("k")}
	for _, sh := range []struct {
		k     kind
		fence *fencing
	}{{fair, fence}, {plainKind{}, fence}, {fair, nil}} {
		r, err := c.startRound(context.Background(), opAcquire, "k", "tok", time.Second, nil, sh.k, sh.fence)
		if err != nil {
			t.Fatal(err)
		}
		cmd := ht.take(t)
		name, script, nkeys := cmd.Name, cmd.Script, cmd.NumKeys
		cmd.Complete(int64(0), nil, SendInfo{Sent: true}) // before any Fatal: Close waits for it
		r.decide(true)
		if script == nil || name != "EVALSHA" {
			t.Fatalf("fenced %v, fair %v: command %q without its script", sh.fence != nil, sh.k == fair, name)
		}
		if got, want := nkeys, r.wireBuf.nkeys; got != want || script.SHA() != r.wireBuf.script.SHA() {
			t.Fatalf("command: %d keys, script %s; want %d, %s", got, script.Name(), want, r.wireBuf.script.Name())
		}
	}
}
