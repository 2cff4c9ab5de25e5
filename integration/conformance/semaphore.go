package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// semaphore: at most k permits, on distinct slots; a waiter woken by a
// release takes the freed slot; a vanished holder's permit is free after
// its validity, within its TTL and one fallback poll; nothing is left.
func semaphore(t *testing.T, c *cluster.Cluster, newClient NewClient) {
	a, b, dead := open(t, newClient, c), open(t, newClient, c), open(t, newClient, c)
	ctx := ctxT(t)
	k := key(t)
	const ttl = time.Second
	newSem := func(client *redlock.Client, ttl time.Duration) *redlock.Semaphore {
		s, err := client.NewSemaphore(k, 2, redlock.WithTTL(ttl), redlock.WithMetadata("conformance"))
		must(t, err)
		return s
	}
	sa, sb := newSem(a, 10*time.Second), newSem(b, 10*time.Second)
	// Free permits are taken by Acquire, which tries again where a round
	// failed (a client's first contact with its masters — dials, script
	// loads — can outlast the per-master timeout on a loaded machine);
	// TryAcquire is for the one that must find none free.
	p1, err := sa.Acquire(ctx)
	must(t, err)
	p2, err := sa.Acquire(ctx)
	must(t, err)
	if p1.Slot() == p2.Slot() {
		t.Fatalf("two permits in slot %d", p1.Slot())
	}
	if _, err := sb.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("a third permit of 2: %v, want ErrNotAcquired", err)
	}
	type result struct {
		p   *redlock.Permit
		err error
	}
	woken := make(chan result, 1)
	go func() {
		p, err := sb.Acquire(ctx)
		woken <- result{p, err}
	}()
	// A release not confirmed in time (a busy host) is retried, and the
	// waiter is woken when it runs or finds the slot at its next poll.
	doneWith(t, p1.Release(ctx))
	r := <-woken
	must(t, r.err)
	if r.p.Slot() != p1.Slot() {
		t.Fatalf("the waiter got slot %d, the free one was %d", r.p.Slot(), p1.Slot())
	}
	// The holder of the permit vanishes without releasing it.
	doneWith(t, r.p.Release(ctx))
	pd, err := newSem(dead, ttl).Acquire(ctx)
	must(t, err)
	until := pd.Until()
	dead.Close()
	p3, err := sb.Acquire(ctx)
	must(t, err)
	granted := time.Now()
	if granted.Before(until) {
		t.Fatalf("a vanished holder's permit granted %v before its validity ended", until.Sub(granted))
	}
	// Its TTL plus one fallback poll (the waiter's: at most half its TTL,
	// at most 2 s), with room for a loaded machine.
	if late := granted.Sub(until); late > 3*time.Second {
		t.Errorf("a vanished holder's permit granted %v after its validity ended", late)
	}
	t.Logf("a vanished holder's permit was granted again %v after its validity ended", granted.Sub(until).Round(time.Millisecond))
	doneWith(t, p2.Release(ctx))
	doneWith(t, p3.Release(context.Background()))
	deleteKeys(t, c, layout.PermitKey(k, 0), layout.PermitKey(k, 1),
		layout.MetaKey(layout.PermitKey(k, 0)), layout.MetaKey(layout.PermitKey(k, 1)))
}
