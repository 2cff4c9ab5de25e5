package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// a27NumSub is how many connections master s has subscribed to channel.
func a27NumSub(t *testing.T, s *redistest.Server, channel string) int {
	t.Helper()
	vals, err := redis.Values(s.Do("PUBSUB", "NUMSUB", channel))
	if err != nil || len(vals) != 2 {
		t.Fatalf("PUBSUB NUMSUB: %v, %v", vals, err)
	}
	n, _ := redis.Int(vals[1], nil)
	return n
}

// a27Release runs the plain release script on master s alone, as a
// holder's release that reached that master first (it announces it).
func a27Release(t *testing.T, s *redistest.Server, key, token string) {
	t.Helper()
	n, err := redis.Int(s.Do("EVAL", scripts.Release.Source(), 1, key, token, wakeChannel(key)))
	if err != nil || n != 1 {
		t.Fatalf("release on %s: %d, %v", s.Addr(), n, err)
	}
}

// a27Waiting waits until a fake-clock waiter of key waits: subscribed on
// every master, its backoff timer pending, and its latest attempt (the
// re-check after the subscription, real time) over: settled, the count of
// its client's pauses begun so (settledCount, set before the waiter
// started), is at least 1.
func a27Waiting(t *testing.T, servers []*redistest.Server, fake *clock.Fake, key string, settled *atomic.Int64) {
	t.Helper()
	ok := redistest.WaitFor(ctx5s(t), func() bool {
		for _, s := range servers {
			if a27NumSub(t, s, wakeChannel(key)) != 1 {
				return false
			}
		}
		return fake.Pending() >= 1 && settled.Load() >= 1
	})
	if !ok {
		t.Fatalf("the waiter does not wait: %d pauses begun settled, %d timers pending", settled.Load(), fake.Pending())
	}
}

// The lead master runs a holder's release first and the other masters
// only later (they were slow to get it): the waiter the lead's notice
// woke asks the lead, which grants it, and then the others, which still
// hold the old token: the attempt fails and is rolled back. The other
// masters' notices of the same release come next. The waiter must be
// woken by them (as it was before woken attempts were led: the notice
// that completes a quorum woke a waiter), not sleep until its backoff
// timer, which on this fake clock never fires.
func TestLead_leadReleasedFirstOthersLater(t *testing.T) {
	redistest.SkipShort(t)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			key := "leadorder:leadfirst:" + p.name
			a := awaitHeld(t, p.pipelined, key)
			servers, fake, l, got := a.servers, a.fake, a.held, a.got
			lead := a.w.leadFor(key)
			if lead < 0 || a.holder.leadFor(key) != lead {
				t.Fatalf("leads %d, %d", lead, a.holder.leadFor(key))
			}
			var others []int
			before := map[int]int{}
			for i := range servers {
				if i != lead {
					others = append(others, i)
					before[i] = setCalls(t, servers[i])
				}
			}
			// The lead runs the release first: its notice wakes the waiter.
			a27Release(t, servers[lead], key, l.Token())
			// Its led attempt: the lead grants, the others (still the
			// holder's) refuse, the lead's grant is rolled back.
			asked := redistest.WaitFor(ctx5s(t), func() bool {
				for _, i := range others {
					if setCalls(t, servers[i]) == before[i] {
						return false
					}
				}
				return !exists(t, servers[lead], key) && fake.Pending() >= 1
			})
			if !asked {
				t.Fatal("the woken waiter's led attempt did not reach the other masters")
			}
			// Now the other masters run the release (announcing it).
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the other masters' notices of the release woke nobody: the waiter sleeps until its backoff")
			}
		})
	}
}

// The converse: a non-lead master runs the release first, the lead only
// later; the first notice's led attempt is refused at the lead and asks
// nobody else, and the lead's notice wakes the waiter again.
func TestLead_othersReleasedFirstLeadLater(t *testing.T) {
	redistest.SkipShort(t)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			key := "leadorder:leadlast:" + p.name
			a := awaitHeld(t, p.pipelined, key)
			servers, fake, l, got := a.servers, a.fake, a.held, a.got
			lead := a.w.leadFor(key)
			leadSets := setCalls(t, servers[lead])
			for i := range servers {
				if i != lead {
					a27Release(t, servers[i], key, l.Token())
				}
			}
			if !redistest.WaitFor(ctx5s(t), func() bool { return setCalls(t, servers[lead]) > leadSets && fake.Pending() >= 1 }) {
				t.Fatal("the woken waiter did not ask the lead")
			}
			select {
			case err := <-got:
				t.Fatalf("got the lock (%v) while the lead held the holder's token", err)
			case <-time.After(50 * time.Millisecond):
			}
			a27Release(t, servers[lead], key, l.Token())
			select {
			case err := <-got:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the lead's notice woke nobody")
			}
		})
	}
}

// A lock on several keys, [a, b], is woken by the release of b, and its
// led attempt asks a's lead, which runs b's release last, after a quorum
// of the others: refused there, the waiter must be woken again by that
// master's notice, which is neither the first, nor b's lead's, nor the
// quorum's (a multi-key waiter hears every notice of its keys). Before,
// it slept on (a fake clock; a clean-clone CI run here:
// TestUserPool_pipelinesEveryKind, its multi-key wake).
func TestLead_wokenMultiKeyLockHearsItsFirstKeysLeadLast(t *testing.T) {
	redistest.SkipShort(t)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			b := "{lm:" + p.name + "}b"
			var a string // held by nobody, its lead not b's
			aw := awaitHeldIn(t, p.pipelined, b, func(w *Client) []string {
				for i := 0; a == ""; i++ {
					if k := fmt.Sprintf("{lm:%s}a%d", p.name, i); w.leadFor(k) != w.leadFor(b) {
						a = k
					}
				}
				return []string{a, b}
			})
			servers, l, got := aw.servers, aw.held, aw.got
			leadA := aw.w.leadFor(a)
			scripts := func() int { return servers[leadA].Calls("eval") + servers[leadA].Calls("evalsha") }
			before := scripts()
			// b's release runs on every master but a's lead: the first
			// notice, b's lead's and the quorum's wake the waiter.
			for i := range servers {
				if i != leadA {
					a27Release(t, servers[i], b, l.Token())
				}
			}
			// Its attempt reaches a's lead, which still holds b for the
			// holder and refuses it. (A waiter that asked another master
			// first may have the lock already.)
			var ended error
			done := false
			reached := redistest.WaitFor(ctx5s(t), func() bool {
				select {
				case ended = <-got:
					done = true
				default:
				}
				return done || scripts() > before
			})
			if !reached {
				t.Fatal("the woken waiter did not reach a's lead")
			}
			// a's lead runs the release last: its notice wakes nobody.
			a27Release(t, servers[leadA], b, l.Token())
			if !done {
				select {
				case ended = <-got:
				case <-time.After(5 * time.Second):
					t.Fatal("the waiter sleeps: a's lead, which refused its attempt, ran the release last, and its notice woke nobody")
				}
			}
			if ended != nil {
				t.Fatal(ended)
			}
		})
	}
}
