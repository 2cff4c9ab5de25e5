package redlock

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/stall"
)

// Every master answers an acquisition in 80 ms, past the 50 ms per-master
// timeout, and the adaptive bound waits for them: the validity still
// counts from the call's start, so Until is no later than start + TTL −
// drift, and every master that granted keeps the key at least until then
// (its own expiry, now + PTTL, is not before Until).
func TestAdaptiveBound_validityCountsTheWholeWait(t *testing.T) {
	const ttl = 2 * time.Second
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "pooled"}[pipelined], func(t *testing.T) {
			servers := redistest.Start(t, 3)
			c := slowClientOn(t, servers, pipelined, 80*time.Millisecond, WithTimeout(50*time.Millisecond))
			now := time.Now()
			for i := range c.masters {
				c.bound.Note(i, now.Add(-80*time.Millisecond), now)
			}
			if b := c.bound.For(ttl, time.Now()); b <= 80*time.Millisecond {
				t.Fatalf("bound %v after 80 ms answers, want more than 80 ms", b)
			}
			ctx := context.Background()
			for i := range 3 {
				key := "bound-validity:" + strconv.Itoa(i)
				start := time.Now()
				l, err := c.TryAcquire(ctx, key, WithTTL(ttl))
				if err != nil {
					t.Fatalf("attempt %d on slow masters: %v", i, err)
				}
				took := time.Since(start)
				if took < 80*time.Millisecond {
					t.Fatalf("acquired in %v, before any master could answer", took)
				}
				// The call's own start (l.acquired) is read a little after
				// this test's, before the first command is written.
				if l.acquired.Before(start) || l.acquired.After(start.Add(took-80*time.Millisecond)) {
					t.Fatalf("the call started %v after the test's start, the call took %v", l.acquired.Sub(start), took)
				}
				if limit := l.acquired.Add(ttl - c.drift(ttl)); l.Until().After(limit) {
					t.Errorf("Until %v past the call's start + TTL − drift %v: the wait was not subtracted", l.Until().Sub(l.acquired), ttl-c.drift(ttl))
				}
				// Each master's grant is waited for before it is read.
				for m, s := range servers {
					var left int64
					redistest.Eventually(t, time.Second, "master "+strconv.Itoa(m)+" holds the key", func() bool {
						v, err := s.Do("PTTL", key)
						left, _ = v.(int64)
						return err == nil && left > 0
					})
					if end := time.Now().Add(time.Duration(left+1) * time.Millisecond); end.Before(l.Until()) {
						t.Errorf("master %d frees the key %v before Until", m, l.Until().Sub(end))
					}
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// An extension sent 100 ms before the lock's validity ends, while the
// bound is at its cap (200 ms for a 2 s TTL) and two of three masters are
// stopped: it cannot reach a quorum; it returns within the cap (plus what
// patience adds for a process that did not run), reports the lock lost
// (its validity ran out during the call), and never moves Until past the
// validity the acquisition gave, not even once the stopped masters run
// the late extension (they find the key expired and refuse).
func TestAdaptiveBound_extensionNearExpiryNeverLengthensValidity(t *testing.T) {
	const ttl = 2 * time.Second
	for _, pipelined := range []bool{true, false} {
		t.Run(map[bool]string{true: "pipelined", false: "pooled"}[pipelined], func(t *testing.T) {
			servers := redistest.Start(t, 3)
			timeout := 50 * time.Millisecond
			c := leadClient(t, servers, pipelined, WithTimeout(timeout))
			ctx := context.Background()
			key := "bound-extend-near-expiry"
			l, err := c.TryAcquire(ctx, key, WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			until := l.Until()
			now := time.Now()
			for i := range c.masters {
				c.bound.Note(i, now.Add(-2*time.Second), now)
			}
			ceiling := c.bound.Ceiling(ttl)
			if got := c.bound.For(ttl, time.Now()); got != ceiling {
				t.Fatalf("bound %v after 2 s answers, want the cap %v", got, ceiling)
			}
			// The test is about a moment of the lock's life: 100 ms
			// before its validity ends.
			at := time.NewTimer(time.Until(until.Add(-100 * time.Millisecond)))
			<-at.C
			for _, s := range servers[1:] {
				if err := s.Pause(); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			err = l.Extend(ctx, ttl)
			took := time.Since(start)
			for _, s := range servers[1:] {
				if err := s.Resume(); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("Extend returned after %v: %v", took, err)
			if !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrNotExtended) {
				t.Fatalf("Extend with two of three masters stopped: %v", err)
			}
			if limit := ceiling + stall.LateBound(timeout); took > limit {
				t.Errorf("Extend returned after %v, want at most %v", took, limit)
			}
			if l.Until().After(until) {
				t.Errorf("Until moved %v past the acquisition's validity", l.Until().Sub(until))
			}
			// The resumed masters run the extension late: on a key that
			// expired there, it is refused, and nothing lengthens.
			for m, s := range servers {
				if !s.WaitAbsent(key, 3*time.Second) {
					t.Errorf("master %d still holds the key after its TTL", m)
				}
			}
			if l.Until().After(until) {
				t.Errorf("after the late answers Until moved %v past the acquisition's validity", l.Until().Sub(until))
			}
			if !time.Now().Before(l.Until()) && l.Err() == nil && l.Extend(ctx, ttl) == nil {
				t.Errorf("a lock whose validity ran out was extended")
			}
		})
	}
}
