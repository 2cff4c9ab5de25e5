package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// a29Multi starts three masters, a holder of a and of b (plain locks,
// a minute, on every master), and a fake-clock waiter of the multi-key
// lock [a, b], and returns once it waits. a and b are picked so that
// their leads differ. The waiter releases the lock as soon as it has it.
type a29Multi struct {
	servers   []*redistest.Server
	holder, w *Client
	fake      *clock.Fake
	a, b      string
	la, lb    *Lock
	leadA     int
	leadB     int
	other     int
	got       <-chan error
	scriptsAt func(i int) int
	settled   *atomic.Int64 // the waiter's pauses begun after its latest attempt
	pauses    int64         // settled's count when the waiter last slept
}

func a29Setup(t *testing.T, pipelined bool, name string) *a29Multi {
	t.Helper()
	servers := redistest.Start(t, 3)
	// Generous per-master timeouts, as awaitHeldIn's.
	m := &a29Multi{servers: servers, holder: leadClient(t, servers, pipelined, WithTimeout(realTimeoutIn)),
		fake: clock.NewFake(time.Unix(1_700_000_000, 0))}
	m.w = leadClient(t, servers, pipelined, WithClock(m.fake), WithTimeout(realTimeoutIn))
	m.settled = settledCount(m.w)
	m.b = "{wakemulti:" + name + "}b"
	for i := 0; m.a == ""; i++ {
		if k := fmt.Sprintf("{wakemulti:%s}a%d", name, i); m.w.leadFor(k) != m.w.leadFor(m.b) {
			m.a = k
		}
	}
	m.leadA, m.leadB = m.w.leadFor(m.a), m.w.leadFor(m.b)
	if m.holder.leadFor(m.a) != m.leadA || m.holder.leadFor(m.b) != m.leadB {
		t.Fatal("the clients disagree on the leads")
	}
	m.other = 3 - m.leadA - m.leadB
	m.scriptsAt = func(i int) int { return servers[i].Calls("eval") + servers[i].Calls("evalsha") }
	var err error
	if m.la, err = m.holder.Acquire(context.Background(), m.a, WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if m.lb, err = m.holder.Acquire(context.Background(), m.b, WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	heldEverywhere(t, servers, m.la, m.lb)
	got := make(chan error, 1)
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	m.got = got
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		l, err := m.w.AcquireMulti(ctx, []string{m.a, m.b}, WithTTL(time.Minute), WithWait(time.Hour))
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	a27Waiting(t, servers, m.fake, m.a, m.settled)
	a27Waiting(t, servers, m.fake, m.b, m.settled)
	m.pauses = m.settled.Load()
	return m
}

// settle waits until the waiter, woken by the notices of the releases
// just run, has made its attempt and is asleep again (real time: the
// waiter's led delays are under a millisecond), and checks that it has
// not got the lock.
func (m *a29Multi) settle(t *testing.T) {
	t.Helper()
	if !redistest.Within(10*time.Second, func() bool { return m.settled.Load() > m.pauses || len(m.got) > 0 }) {
		t.Fatal("the notices did not wake the waiter to an attempt within 10 s")
	}
	time.Sleep(200 * time.Millisecond) // the subject: a spell in which the waiter, woken by the other notices too, must not get the lock
	select {
	case err := <-m.got:
		t.Fatalf("the waiter ended early: %v", err)
	default:
	}
	m.pauses = m.settled.Load()
}

func (m *a29Multi) wantLock(t *testing.T, why string) {
	t.Helper()
	select {
	case err := <-m.got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal(why)
	}
}

// A multi-key waiter [a, b] is refused at a master because ANOTHER of its
// keys is still held there, and that master's notice of the other key's
// release is neither the first, nor from that key's lead, nor the one
// that completes a quorum: nothing wakes the waiter again although both
// keys are free on every master.
//
//  1. b is released on its lead and on the third master (a quorum): the
//     notices wake the waiter, whose attempts (led by b's lead) are
//     refused there, a being held everywhere.
//  2. a is released on every master, a's lead first: the waiter is woken
//     (a's lead's notice, then the quorum's) and asks a's lead, which
//     still holds b: refused.
//  3. a's lead runs b's release last: its notice of b is the third, not
//     b's lead's: it wakes nobody, and the waiter sleeps (on a fake
//     clock, forever; on a real one, until its backoff or fallback poll).
func TestWake_multiKeyRefusedAtLeadForItsOtherKey(t *testing.T) {
	redistest.SkipShort(t)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			m := a29Setup(t, p.pipelined, "other:"+p.name)
			s := m.servers
			a27Release(t, s[m.leadB], m.b, m.lb.Token())
			a27Release(t, s[m.other], m.b, m.lb.Token())
			m.settle(t)
			before := m.scriptsAt(m.leadA)
			a27Release(t, s[m.leadA], m.a, m.la.Token())
			a27Release(t, s[m.leadB], m.a, m.la.Token())
			a27Release(t, s[m.other], m.a, m.la.Token())
			m.settle(t)
			if m.scriptsAt(m.leadA) < before+2 { // a's release there, and the waiter's attempt
				t.Fatal("the waiter did not ask a's lead")
			}
			a27Release(t, s[m.leadA], m.b, m.lb.Token())
			m.wantLock(t, "the waiter sleeps: a's lead refused it for b, and its notice of b's release woke nobody")
		})
	}
}

// A multi-key waiter [a, b] on five masters: a and b, held by two locks,
// are released master by master in random orders, interleaved, a few
// milliseconds apart or at once (so that notices of a and of b come in
// quick succession and the waiter's woken key is overwritten). Once
// every master ran both releases, the waiter, on a fake clock, must have
// been woken to an attempt that finds both keys free on a quorum.
func TestWake_multiKeyRandomReleaseOrders(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 5)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			// Generous per-master timeouts, as awaitHeldIn's.
			holder := leadClient(t, servers, p.pipelined, WithTimeout(realTimeoutIn))
			for trial := range 8 {
				seed := uint64(time.Now().UnixNano())
				rng := rand.New(rand.NewPCG(seed, uint64(trial)))
				a := fmt.Sprintf("{wakemultirace:%s:%d:%d}a", p.name, trial, seed)
				b := fmt.Sprintf("{wakemultirace:%s:%d:%d}b", p.name, trial, seed)
				fake := clock.NewFake(time.Unix(1_700_000_000, 0))
				w := leadClient(t, servers, p.pipelined, WithClock(fake), WithTimeout(realTimeoutIn))
				settled := settledCount(w)
				la, err := holder.Acquire(context.Background(), a, WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				lb, err := holder.Acquire(context.Background(), b, WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				heldEverywhere(t, servers, la, lb)
				got := make(chan error, 1)
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					l, err := w.AcquireMulti(ctx, []string{a, b}, WithTTL(time.Minute), WithWait(time.Hour))
					if err == nil {
						err = l.Release(context.Background())
					}
					got <- err
				}()
				a27Waiting(t, servers, fake, a, settled)
				a27Waiting(t, servers, fake, b, settled)
				type step struct {
					l *Lock
					m int
				}
				var steps []step
				for i := range servers {
					steps = append(steps, step{la, i}, step{lb, i})
				}
				rng.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
				var order []string
				for _, st := range steps {
					a27Release(t, servers[st.m], st.l.Key(), st.l.Token())
					name := "a"
					if st.l == lb {
						name = "b"
					}
					order = append(order, fmt.Sprintf("%s@%d", name, st.m))
					if d := rng.IntN(4); d > 0 {
						time.Sleep(time.Duration(d) * time.Millisecond) // the subject: releases a random few ms apart
					}
				}
				select {
				case err := <-got:
					if err != nil {
						t.Fatalf("trial %d: %v", trial, err)
					}
				case <-time.After(5 * time.Second):
					cancel()
					<-got
					t.Fatalf("trial %d: the waiter sleeps though both keys are free everywhere: releases %v (leads: a %d, b %d)",
						trial, order, w.leadFor(a), w.leadFor(b))
				}
				cancel()
			}
		})
	}
}
