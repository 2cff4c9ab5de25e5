package integration_test

// Fenced read-modify-write, checked for linearizability with Porcupine:
// holders increment one counter on a Redis of its own through fence.Store
// under a fenced lock on N=3 masters, and some holders stall between their
// read and their write until a successor has read.

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/redlock"
)

// incrOutcome is what one increment returned: the new value, a refusal
// (nothing stored), or an error that leaves it unknown.
type incrOutcome struct {
	value   int
	stale   bool
	unknown bool
}

// counterModel is a counter that only increments: an increment that
// returned a value took the counter from value−1 to value, a refused one
// changed nothing, and one of unknown outcome did either.
var counterModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{0} },
	Step: func(state, _, output any) []any {
		s, out := state.(int), output.(incrOutcome)
		switch {
		case out.unknown:
			return []any{s, s + 1}
		case out.stale:
			return []any{s}
		case out.value == s+1:
			return []any{out.value}
		}
		return nil
	},
}).ToModel()

// rmw is one way to increment the counter with a token: read, (stall),
// write. stall runs between the read and the write.
type rmw func(ctx context.Context, store *fence.Store, key string, token uint64, stall func()) (int, error)

// fencedRMW is Store.Update: the read records the token.
func fencedRMW(ctx context.Context, store *fence.Store, key string, token uint64, stall func()) (int, error) {
	var n int
	err := store.Update(ctx, key, token, 0, func(old []byte, _ bool) ([]byte, error) {
		n, _ = strconv.Atoi(string(old))
		n++
		stall()
		return []byte(strconv.Itoa(n)), nil
	})
	return n, err
}

// getSetRMW reads with Get, which records nothing, and writes with Set.
func getSetRMW(ctx context.Context, store *fence.Store, key string, token uint64, stall func()) (int, error) {
	old, _, err := store.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	n, _ := strconv.Atoi(string(old))
	n++
	stall()
	return n, store.Set(ctx, key, token, []byte(strconv.Itoa(n)), 0)
}

// history records increments for Porcupine.
type history struct {
	mu  sync.Mutex
	ops []porcupine.Operation
	// read is the highest token that has read the counter, for a stalled
	// holder to wait for its successor.
	read atomic.Uint64
}

// do runs one increment by client with token, recording it.
func (h *history) do(ctx context.Context, client int, f rmw, store *fence.Store, token uint64, stall func()) incrOutcome {
	call := time.Now().UnixNano()
	n, err := f(ctx, store, "counter", token, func() {
		for {
			if old := h.read.Load(); old >= token || h.read.CompareAndSwap(old, token) {
				break
			}
		}
		stall()
	})
	ret := time.Now().UnixNano()
	out := incrOutcome{value: n}
	switch {
	case errors.Is(err, fence.ErrStale):
		out = incrOutcome{stale: true}
	case err != nil:
		out, ret = incrOutcome{unknown: true}, math.MaxInt64 // may take effect any time later
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
	return out
}

// waitSuccessorRead waits (polling, bounded) until a holder with a token
// above token has read the counter.
func (h *history) waitSuccessorRead(token uint64, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		if h.read.Load() > token {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

func (h *history) check(t *testing.T) porcupine.CheckResult {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	res, _ := porcupine.CheckOperationsVerbose(counterModel, h.ops, time.Minute)
	return res
}

// The interleaving, deterministic: A (token 1) reads, stalls past
// its lock; B (token 2) reads; A writes; B writes. With Get and Set, A's
// write is accepted and B's overwrites it: one increment lost, and
// Porcupine says so. With Update, B's read turns A's write away.
func TestFencedUpdate_stalledHolderAfterSuccessorsRead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		f     rmw
		legal porcupine.CheckResult
	}{{"get and set", getSetRMW, porcupine.Illegal}, {"update", fencedRMW, porcupine.Ok}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := cluster.Start(t, 1).Masters[0]
			store, err := fence.NewStore(srv.Pool())
			must(t, err)
			ctx := context.Background()
			h := &history{}
			aRead, bRead := make(chan struct{}), make(chan struct{})
			done := make(chan incrOutcome)
			go func() {
				done <- h.do(ctx, 1, tc.f, store, 1, func() { close(aRead); <-bRead })
			}()
			<-aRead
			go func() {
				done <- h.do(ctx, 2, tc.f, store, 2, func() {
					close(bRead)
					h.waitOneReturned(t)
				})
			}()
			aOut := <-done
			bOut := <-done
			if got := h.check(t); got != tc.legal {
				t.Fatalf("Porcupine: %v, want %v (A: %+v, B: %+v)", got, tc.legal, aOut, bOut)
			}
		})
	}
}

// waitOneReturned is B's stall: until A's increment returned (the first
// operation recorded is A's).
func (h *history) waitOneReturned(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		h.mu.Lock()
		n := len(h.ops)
		h.mu.Unlock()
		if n >= 1 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Error("A's write did not return")
}

// Holders under a fenced lock on N=3 masters increment through Update;
// one in six stalls past its lock's validity between its read and its
// write, until a successor has read. Porcupine finds the history
// linearizable, and the stalled writes were refused.
func TestFencedUpdate_porcupine(t *testing.T) {
	c := cluster.Start(t, 3)
	srv := cluster.Start(t, 1).Masters[0]
	store, err := fence.NewStore(srv.Pool())
	must(t, err)
	const clients, rounds = 6, 20
	h := &history{}
	var stalls, refused atomic.Int64
	var wg sync.WaitGroup
	for id := 0; id < clients; id++ {
		client := newClient(t, connPaths[id%2], c, redlock.WithTimeout(100*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for r := 0; r < rounds; r++ {
				l, err := client.Acquire(ctx, key(t), redlock.WithTTL(500*time.Millisecond), redlock.WithFencing())
				if err != nil {
					t.Errorf("client %d: %v", id, err)
					return
				}
				stall := func() {}
				if rng.IntN(6) == 0 {
					stalls.Add(1)
					stall = func() {
						// Paused past the validity, until a successor read.
						time.Sleep(time.Until(l.Until())) // the subject: the lock's validity passes
						h.waitSuccessorRead(l.Fence(), 2*time.Second)
					}
				}
				if out := h.do(ctx, id, fencedRMW, store, l.Fence(), stall); out.stale {
					refused.Add(1)
				}
				_ = l.Release(context.Background())
			}
		}()
	}
	wg.Wait()
	res := h.check(t)
	t.Logf("%d increments, %d stalled past their lock, %d refused as stale; Porcupine: %v", len(h.ops), stalls.Load(), refused.Load(), res)
	if res != porcupine.Ok {
		t.Fatalf("the history of fenced increments is %v: an update was lost", res)
	}
	if stalls.Load() > 0 && refused.Load() == 0 {
		t.Fatal("no stalled holder's write was refused: the check did not bite")
	}
}
