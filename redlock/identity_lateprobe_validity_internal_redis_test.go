package redlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// firstSend is a master's transport that notes when its first command
// other than INFO was sent (a round's SET).
type firstSend struct {
	Transport
	mu sync.Mutex
	at time.Time
}

func (s *firstSend) Send(cmd *Command) {
	if cmd.Name != "INFO" {
		s.mu.Lock()
		if s.at.IsZero() {
			s.at = time.Now()
		}
		s.mu.Unlock()
	}
	s.Transport.Send(cmd)
}

func (s *firstSend) first() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at
}

// With a short TTL (150 to 400 ms) and every master's probe read late (30
// to 300 ms, against a probe that waits 150 ms), a fresh Client's first
// acquisition waits for the probes no longer than the lock's validity:
// a lock it returns has validity left and its Until is no later than
// the first SET's sending plus TTL − drift; an attempt that fails returns
// within the TTL (and its rollback's round trip), with nothing left.
func TestIdentity_lateProbeNeverGivesValidityPastTTL(t *testing.T) {
	servers := redistest.Start(t, 3)
	const timeout = 50 * time.Millisecond
	const slack = 400 * time.Millisecond // a loaded machine's lateness
	for _, p := range leadPaths {
		got, failed := 0, 0
		for _, ttl := range []time.Duration{150 * time.Millisecond, 250 * time.Millisecond, 400 * time.Millisecond} {
			for _, delay := range []time.Duration{30 * time.Millisecond, 80 * time.Millisecond, 130 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond} {
				t.Run(fmt.Sprintf("%s/%v/%v", p.name, ttl, delay), func(t *testing.T) {
					key := fmt.Sprintf("lateprobe:ttl:%s:%v:%v", p.name, ttl, delay)
					c := lateProbeClient(t, servers, p.pipelined, timeout, delay, 0, 1, 2)
					sends := make([]*firstSend, len(servers))
					for i := range servers {
						sends[i] = &firstSend{Transport: c.masters[i].t}
						c.masters[i].t = sends[i]
					}
					start := time.Now()
					l, err := c.TryAcquire(context.Background(), key, WithTTL(ttl))
					ret := time.Now()
					if err != nil {
						failed++
						t.Logf("failed after %v: %v", ret.Sub(start), err)
						if took := ret.Sub(start); took > ttl+timeout+slack {
							t.Errorf("a failed attempt took %v, want at most the TTL %v and a rollback (%v, with %v of slack)", took, ttl, timeout, slack)
						}
						leftover.Within(t, ttl+leftover.Bound, servers, key)
						return
					}
					got++
					until := l.Until()
					var sent time.Time
					for _, s := range sends {
						if at := s.first(); !at.IsZero() && (sent.IsZero() || at.Before(sent)) {
							sent = at
						}
					}
					limit := sent.Add(ttl - c.drift(ttl))
					t.Logf("acquired after %v, validity left at return %v", ret.Sub(start), until.Sub(ret))
					if until.After(limit) {
						t.Errorf("Until is %v past the first SET's sending plus TTL − drift", until.Sub(limit))
					}
					if !until.After(ret) {
						t.Errorf("a lock returned with no validity left: Until %v before the call returned", ret.Sub(until))
					}
					_ = l.Release(context.Background())
					leftover.None(t, servers, key)
				})
			}
		}
		t.Logf("%s: %d acquired, %d failed", p.name, got, failed)
	}
}

// An extension counts grants by identity as an acquisition does: of five
// masters, 3 and 4 granted the acquisition but answer their probes late
// (their grants were not counted; the lock stands on 0, 1 and 2), and
// master 0 lost the key, so an extension needs a grant of 3 or 4. With
// their answers 5 s late it fails at its own wait, not at an
// acquisition's longer bound for late probes (the lock it extends may
// run out sooner), whatever the TTL, and the lock's Until does not move
// later.
func TestIdentity_extendWaitsForLateProbeOnlyWithinItsWait(t *testing.T) {
	servers := redistest.Start(t, 5)
	const timeout = 100 * time.Millisecond
	const slack = 500 * time.Millisecond
	cases := []struct {
		name  string
		delay time.Duration
		ttl   time.Duration
		bound time.Duration // the extension's longest wait
	}{
		{"neverWithinTheRoundBound", 5 * time.Second, time.Minute, timeout},
		{"neverWithinAShortTTL", 5 * time.Second, 500 * time.Millisecond, timeout},
	}
	for _, p := range leadPaths {
		for _, tc := range cases {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				key := "lateprobe:extend:" + p.name + ":" + tc.name
				c := lateProbeClient(t, servers, p.pipelined, timeout, tc.delay, 3, 4)
				l, err := c.TryAcquire(context.Background(), key, WithTTL(tc.ttl))
				if err != nil {
					t.Fatalf("acquiring on masters 0, 1 and 2: %v", err)
				}
				defer l.Release(context.Background())
				if _, err := servers[0].Do("DEL", key); err != nil {
					t.Fatal(err)
				}
				before := l.Until()
				start := time.Now()
				err = l.Extend(context.Background(), tc.ttl)
				ret := time.Now()
				took := ret.Sub(start)
				until := l.Until()
				t.Logf("extend took %v: %v; Until moved by %v", took, err, until.Sub(before))
				if took > tc.bound+slack {
					t.Errorf("the extension took %v, want at most %v (with %v of slack)", took, tc.bound, slack)
				}
				if err == nil {
					t.Fatal("extended on the grants of masters not identified")
				}
				if until.After(before) {
					t.Errorf("a failed extension moved Until %v later", until.Sub(before))
				}
			})
		}
	}
	leftover.Within(t, time.Minute+leftover.Bound, servers)
}
