package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// newInfoShaped is newInfoLate whose answers shape changes.
func newInfoShaped(t Transport, delay time.Duration, shape func(any, error) (any, error)) *infoLate {
	s := newInfoLate(t, delay)
	s.shape = shape
	return s
}

// aliasGrantsTwice is an attempt that one server under two addresses
// grants at both (a Reentrant's owner, a read hold), run on c.
type aliasGrantsTwice struct {
	name string
	// hold makes another client hold key on the refusing master, so that
	// it refuses this kind, until the test ends.
	hold func(t *testing.T, refusing *redistest.Server, key string)
	try  func(c *Client, key string) (release func(), err error)
}

var aliasKinds = []aliasGrantsTwice{
	{
		name: "reentrant",
		hold: func(t *testing.T, refusing *redistest.Server, key string) {
			other := otherClient(t, refusing)
			oh, err := other.NewReentrant(key, "another-owner", WithTTL(10*time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if err := oh.TryAcquire(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = oh.Release(context.Background()) })
		},
		try: func(c *Client, key string) (func(), error) {
			re, err := c.NewReentrant(key, "owner", WithTTL(time.Minute))
			if err != nil {
				return nil, err
			}
			if err := re.TryAcquire(context.Background()); err != nil {
				return nil, err
			}
			return func() { _ = re.Release(context.Background()) }, nil
		},
	},
	{
		name: "read",
		hold: func(t *testing.T, refusing *redistest.Server, key string) {
			other := otherClient(t, refusing)
			w, err := other.TryAcquireWrite(context.Background(), key, WithTTL(10*time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Release(context.Background()) })
		},
		try: func(c *Client, key string) (func(), error) {
			l, err := c.TryAcquireRead(context.Background(), key, WithTTL(time.Minute))
			if err != nil {
				return nil, err
			}
			return func() { _ = l.Release(context.Background()) }, nil
		},
	},
}

// otherClient is an identified Client of the one master s, closed with
// the test.
func otherClient(t *testing.T, s *redistest.Server) *Client {
	t.Helper()
	c, err := newRedigoFromAddrs([]string{s.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// neverTwice makes c's first attempt of kind k on key, on masters of
// which two are one server and the third refuses, and fails the test if
// it succeeds; then waits for the duplicate to be known and checks that
// the next call is refused with ErrInvalid.
func neverTwice(t *testing.T, c *Client, k aliasGrantsTwice, key string) {
	t.Helper()
	release, err := k.try(c, key)
	if err == nil {
		release()
		t.Fatal("acquired on the grants of one server under two addresses and a refusal")
	}
	t.Logf("first call: %v", err)
	if !errors.Is(err, ErrNotAcquired) && !errors.Is(err, ErrInvalid) {
		t.Errorf("%v, want ErrNotAcquired or ErrInvalid", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !redistest.WaitFor(ctx, func() bool { return c.ident.Dup() != nil }) {
		t.Fatal("the two addresses of one server were never found to be one")
	}
	if release, err := k.try(c, key); err == nil {
		release()
		t.Fatal("acquired once the duplicate was known")
	} else if !errors.Is(err, ErrInvalid) {
		t.Errorf("after the duplicate was known: %v, want ErrInvalid", err)
	}
}

// One server under two addresses (127.0.0.1:P and localhost:P), a third
// master refusing, and the probes of the two addresses read late, each
// by its own delay past the probe's wait, in either order: a grant waits
// for its master's late answer, but the two addresses' grants never make
// a quorum of two, whichever is identified first; the attempt fails, its
// grants are rolled back, and the next call is refused as a duplicate.
func TestIdentity_aliasWithLateProbesNeverCountsTwice(t *testing.T) {
	servers := redistest.Start(t, 2)
	port := strings.TrimPrefix(servers[0].Addr(), "127.0.0.1:")
	addrs := []string{servers[0].Addr(), servers[1].Addr(), "localhost:" + port}
	delays := [][2]time.Duration{ // master 0's, master 2's
		{0, 300 * time.Millisecond},
		{300 * time.Millisecond, 0},
		{150 * time.Millisecond, 600 * time.Millisecond},
		{600 * time.Millisecond, 150 * time.Millisecond},
		{400 * time.Millisecond, 400 * time.Millisecond},
	}
	for _, k := range aliasKinds {
		key := "alias-late:" + k.name
		k.hold(t, servers[1], key)
		for _, p := range leadPaths {
			for _, d := range delays {
				t.Run(fmt.Sprintf("%s/%s/%v-%v", k.name, p.name, d[0], d[1]), func(t *testing.T) {
					c, err := newRedigoFromAddrs(addrs, withPipelining(p.pipelined), WithTimeout(100*time.Millisecond))
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					c.masters[0].t = newInfoShaped(c.masters[0].t, d[0], nil) // before any call
					c.masters[2].t = newInfoShaped(c.masters[2].t, d[1], nil)
					neverTwice(t, c, k, key)
					leftover.None(t, servers[:1], key)
				})
			}
		}
	}
}

// infoDelayingProxy is a TCP proxy in front of upstream that holds each
// INFO command delay before it runs it, and forwards everything else at
// once: a server behind a proxy whose answers to the probe come late.
func infoDelayingProxy(t *testing.T, upstream string, delay time.Duration) string {
	return hostile.NewProxy(t, upstream, func(c *hostile.Conn, cmd []string) hostile.Verdict {
		if cmd[0] == "INFO" {
			tm := time.NewTimer(delay)
			defer tm.Stop()
			select {
			case <-tm.C:
			case <-c.Quit():
			}
		}
		return hostile.Forward
	}).Addr()
}

// One server listed directly and through a TCP proxy that holds INFO
// 150 to 600 ms (the pooled path sends it on a connection of its own, so
// the lock commands pass it; the pipelined one queues them behind it),
// the proxy first or last in the list, and a third master refusing: the
// two addresses never count twice.
func TestIdentity_aliasBehindInfoDelayingProxyNeverCountsTwice(t *testing.T) {
	servers := redistest.Start(t, 2)
	for _, k := range aliasKinds {
		key := "alias-proxy:" + k.name
		k.hold(t, servers[1], key)
		for _, delay := range []time.Duration{150 * time.Millisecond, 600 * time.Millisecond} {
			proxy := infoDelayingProxy(t, servers[0].Addr(), delay)
			for _, order := range []struct {
				name  string
				addrs []string
			}{
				{"proxyLast", []string{servers[0].Addr(), servers[1].Addr(), proxy}},
				{"proxyFirst", []string{proxy, servers[1].Addr(), servers[0].Addr()}},
			} {
				for _, p := range leadPaths {
					t.Run(fmt.Sprintf("%s/%v/%s/%s", k.name, delay, order.name, p.name), func(t *testing.T) {
						c, err := newRedigoFromAddrs(order.addrs, withPipelining(p.pipelined), WithTimeout(100*time.Millisecond))
						if err != nil {
							t.Fatal(err)
						}
						defer c.Close()
						neverTwice(t, c, k, key)
						leftover.None(t, servers[:1], key)
					})
				}
			}
		}
	}
}

// A master's late probe answer carrying another master's run_id (a
// proxy or a server that lies) is a duplicate however late it comes: the
// attempt that waited for it fails with ErrInvalid naming both, and its
// grants are rolled back. Master 2 refuses, so the attempt needs master
// 1's grant, whose probe answers 300 ms late with master 0's run_id.
func TestIdentity_lateProbeWithAnotherMastersRunIDIsRefused(t *testing.T) {
	servers := redistest.Start(t, 3)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			key := "lateprobe:liar:" + p.name
			if _, err := servers[2].Do("SET", key, "another-holder", "PX", 600000); err != nil {
				t.Fatal(err)
			}
			defer servers[2].Do("DEL", key)
			info, err := servers[0].Do("INFO", "server")
			if err != nil {
				t.Fatal(err)
			}
			c := lateProbeClient(t, servers, p.pipelined, 100*time.Millisecond, 0)
			c.masters[1].t = newInfoShaped(c.masters[1].t, 300*time.Millisecond, func(any, error) (any, error) {
				return info, nil
			})
			l, err := c.TryAcquire(context.Background(), key, WithTTL(time.Minute))
			if err == nil {
				_ = l.Release(context.Background())
				t.Fatal("acquired on a master whose probe named another master's run_id")
			}
			if !errors.Is(err, ErrInvalid) {
				// The first call may end before the lie is read; the
				// next must be refused.
				t.Logf("first call: %v", err)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if !redistest.WaitFor(ctx, func() bool { return c.ident.Dup() != nil }) {
					t.Fatal("the lie was never recorded as a duplicate")
				}
				if _, err := c.TryAcquire(context.Background(), key, WithTTL(time.Minute)); !errors.Is(err, ErrInvalid) {
					t.Fatalf("%v, want ErrInvalid", err)
				}
			}
			leftover.None(t, servers[:2], key)
		})
	}
}

// A master's late probe answer that is not a server's (garbled bytes, a
// reply of another type, no run_id line) makes it a master that cannot be
// told apart: its grant counts as one vote of its own (as the same
// answer read in time would), the call neither hangs nor panics, and
// what it holds is released.
func TestIdentity_lateProbeWithoutRunIDCountsAsItsOwnVote(t *testing.T) {
	servers := redistest.Start(t, 3)
	shapes := []struct {
		name  string
		shape func(any, error) (any, error)
	}{
		{"noRunID", func(any, error) (any, error) { return []byte("# Server\r\nredis_version:7.2.0\r\n"), nil }},
		{"otherType", func(any, error) (any, error) { return int64(7), nil }},
		{"badRunID", func(any, error) (any, error) { return []byte("# Server\r\nrun_id:xyz\r\n"), nil }},
		{"twoRunIDs", func(reply any, err error) (any, error) {
			b, _ := reply.([]byte)
			return append(append([]byte(nil), b...), []byte("run_id:0000000000000000000000000000000000000000\r\n")...), err
		}},
	}
	for _, p := range leadPaths {
		for _, s := range shapes {
			t.Run(p.name+"/"+s.name, func(t *testing.T) {
				key := "lateprobe:shape:" + p.name + ":" + s.name
				if _, err := servers[2].Do("SET", key, "another-holder", "PX", 600000); err != nil {
					t.Fatal(err)
				}
				defer servers[2].Do("DEL", key)
				c := lateProbeClient(t, servers, p.pipelined, 100*time.Millisecond, 0)
				c.masters[1].t = newInfoShaped(c.masters[1].t, 300*time.Millisecond, s.shape)
				l, err := c.TryAcquire(context.Background(), key, WithTTL(time.Minute))
				if err != nil {
					t.Logf("%v", err)
				} else if err := l.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
				leftover.None(t, servers[:2], key)
			})
		}
	}
}

// Probe answers completed while the Client closes and after its Close
// returned (every master's INFO held until its transport is closed, and
// Close not waiting for them: a transport breaking its contract) change
// nothing and leave nothing running: the attempt made before fails (no
// master identified), and the late answers are recorded without a
// panic.
func TestIdentity_probeAnswerAfterCloseIsHarmless(t *testing.T) {
	servers := redistest.Start(t, 3)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			key := "lateprobe:afterclose:" + p.name
			c := lateProbeClient(t, servers, p.pipelined, 100*time.Millisecond, 0)
			shaped := make([]*infoLate, len(servers))
			for i := range servers {
				shaped[i] = newInfoLate(c.masters[i].t, time.Hour)
				shaped[i].abandon = true
				c.masters[i].t = shaped[i]
			}
			failsUncountedWithin(t, c, key, 2*time.Second, 100*time.Millisecond+time.Second+200*time.Millisecond)
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			for _, s := range shaped {
				s.wg.Wait() // the answers, handed over as Close ran
			}
			if c.ident.Dup() != nil {
				t.Error("answers read after Close made a duplicate")
			}
			leftover.None(t, servers, key)
		})
	}
}
