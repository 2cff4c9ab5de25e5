package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// The re-send of what a connection the master closed carried (the
// pipelined muxConn.fail, and the pooled path's own re-send on a fresh
// connection). A master that closes a connection may have run some of
// what it read before it closed it: a SET NX or a release script then
// runs twice. The second run must never be taken for a fresh outcome that
// hides the first one.

// ranThenReset is a hook that, for the first command of name on key
// (a SET's first argument, an EVALSHA's first key), runs it on the real
// master and then resets the client's connection without replying: the
// command ran, the reply was lost with the connection.
type ranThenReset struct {
	s    *redistest.Server
	name string // "SET" or "EVALSHA"
	key  string
	n    int32 // how many times to do it (0: once)

	hits atomic.Int32
}

func (h *ranThenReset) hook(c *hostile.Conn, cmd []string) hostile.Verdict {
	if cmd[0] != h.name && !(h.name == "EVALSHA" && cmd[0] == "EVAL") {
		return hostile.Forward
	}
	key := ""
	switch {
	case cmd[0] == "SET" && len(cmd) > 1:
		key = cmd[1]
	case cmd[0] != "SET" && len(cmd) > 3:
		key = cmd[3]
	}
	if key != h.key {
		return hostile.Forward
	}
	limit := max(h.n, 1)
	if h.hits.Load() >= limit {
		return hostile.Forward
	}
	if _, err := h.s.Run(cmd); err != nil {
		// Not run (a NOSCRIPT on the pooled path, whose redigo script
		// falls back to EVAL): let the client see it, and take the EVAL.
		return hostile.Forward
	}
	h.hits.Add(1)
	return hostile.HangUp
}

// TestResend_grantThatRanIsNotAFreshRefusal: the master ran an
// acquisition's SET NX and closed the connection before the reply went
// out; the client re-sends it on a new connection, where it finds the
// client's own key and is refused. That refusal must not count as
// "another holder has it" (a lone master would then be reported contended,
// and worse, nothing would undo the grant), nor as a grant: the attempt
// fails on that master and its rollback deletes the key. Both paths, N=1.
func TestResend_grantThatRanIsNotAFreshRefusal(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		s := redistest.StartOne(t)
		const key = "lr:resent:set"
		h := &ranThenReset{s: s, name: "SET", key: key}
		p := hostile.NewProxy(t, s.Addr(), h.hook)
		c := addrClient(t, path, []string{p.Addr()})
		ctx := context.Background()
		warm, err := c.TryAcquire(ctx, "lr:resent:warm")
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		l, err := c.TryAcquire(ctx, key, redlock.WithTTL(time.Minute))
		took := time.Since(start)
		if h.hits.Load() != 1 {
			t.Fatalf("the hook ran %d times, want 1", h.hits.Load())
		}
		if err == nil {
			// Granted: acceptable only if the lock is really ours.
			v, _ := redis.String(s.Do("GET", key))
			if v != l.Token() {
				t.Fatalf("granted, but the master holds %q, not the lock's token %q", v, l.Token())
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
		} else {
			if !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("TryAcquire: %v, want ErrNotAcquired", err)
			}
			var qe *redlock.QuorumError
			if errors.As(err, &qe) && len(qe.Refused) > 0 {
				t.Errorf("the re-sent SET that found our own key counted as a refusal (contended): %v", err)
			}
		}
		t.Logf("%s: TryAcquire took %v: %v", path, took, err)
		if took > 2*realTimeout {
			t.Errorf("TryAcquire took %v, over two per-master timeouts", took)
		}
		if !s.WaitAbsent(key, 5*time.Second) {
			v, _ := redis.String(s.Do("GET", key))
			t.Fatalf("the key is still on the master (%q) after the failed attempt: its rollback did not delete it", v)
		}
		// The key is free for the next caller.
		l2, err := c.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("after: %v", err)
		}
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestResend_grantThatRanOnOneOfThreeIsReleased: the same on one of three
// masters. The other two grant, so the lock is held; the master where the
// first SET ran holds the lock's own token, and the release deletes it
// there too (the key must not stay on it until its TTL).
func TestResend_grantThatRanOnOneOfThreeIsReleased(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		servers := redistest.Start(t, 3)
		const key = "lr:resent:set3"
		h := &ranThenReset{s: servers[0], name: "SET", key: key}
		p := hostile.NewProxy(t, servers[0].Addr(), h.hook)
		c := addrClient(t, path, []string{p.Addr(), servers[1].Addr(), servers[2].Addr()})
		ctx := context.Background()
		l, err := c.TryAcquire(ctx, key, redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("two of three masters granted: %v", err)
		}
		// The quorum may come from the two others before the first answers.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		redistest.WaitFor(wctx, func() bool {
			v, _ := redis.String(servers[0].Do("GET", key))
			return h.hits.Load() == 1 && v == l.Token()
		})
		if h.hits.Load() != 1 {
			t.Fatalf("the hook ran %d times, want 1", h.hits.Load())
		}
		for i, s := range servers {
			v, _ := redis.String(s.Do("GET", key))
			if v != l.Token() {
				t.Errorf("master %d holds %q, want the lock's token", i, v)
			}
		}
		rerr := l.Release(ctx)
		t.Logf("%s: release: %v", path, rerr)
		if rerr != nil {
			t.Errorf("release: %v", rerr)
		}
		for i, s := range servers {
			if !s.WaitAbsent(key, 5*time.Second) {
				t.Errorf("master %d still holds the key after the release", i)
			}
		}
	})
}

// TestResend_releaseThatRanIsNotALoss: the master ran a release script and
// closed the connection before replying; the re-send finds nothing to
// delete. The key is gone, so the release must not be reported as a
// release of a lock someone else took (a lost lock), and nothing may be
// left on the master; the next acquisition succeeds at once.
func TestResend_releaseThatRanIsNotALoss(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		s := redistest.StartOne(t)
		const key = "lr:resent:release"
		h := &ranThenReset{s: s, name: "EVALSHA", key: key}
		p := hostile.NewProxy(t, s.Addr(), h.hook)
		c := addrClient(t, path, []string{p.Addr()})
		ctx := context.Background()
		l, err := c.TryAcquire(ctx, key, redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rerr := l.Release(ctx)
		took := time.Since(start)
		if h.hits.Load() != 1 {
			t.Fatalf("the hook ran %d times, want 1", h.hits.Load())
		}
		t.Logf("%s: release took %v: %v", path, took, rerr)
		if rerr != nil && errors.Is(rerr, redlock.ErrLockLost) {
			t.Errorf("a release that ran, re-sent, reported the lock lost: %v", rerr)
		}
		if took > 2*realTimeout {
			t.Errorf("release took %v", took)
		}
		if n, err := redis.Int(s.Do("EXISTS", key)); err != nil || n != 0 {
			t.Fatalf("EXISTS = %d, %v after the release ran", n, err)
		}
		// A release that was not confirmed is retried; the retry finds
		// nothing and must end, not be retried for ever.
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if !redistest.WaitFor(fctx, func() bool { return redlock.Finishing(c) == 0 }) {
			t.Errorf("%d retries still pending 5 s after the release", redlock.Finishing(c))
		}
		l2, err := c.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("after: %v", err)
		}
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestResend_ranThenResetUnderLoad: on three masters, pipelined and
// pooled, 24 goroutines lock their own keys and two shared ones while the
// first master runs every 7th command of the shared keys and then resets
// the connection (what else the connection carried is dropped unread, as
// a master that closes a connection drops it). Each shared key stays
// exclusive, every release that reports success leaves the key on no
// master, and every failed attempt's key goes (its rollback).
func TestResend_ranThenResetUnderLoad(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		servers := redistest.Start(t, 3)
		var seen atomic.Int64
		var resets atomic.Int64
		hook := func(c *hostile.Conn, cmd []string) hostile.Verdict {
			if cmd[0] != "SET" && cmd[0] != "EVALSHA" && cmd[0] != "EVAL" {
				return hostile.Forward
			}
			if seen.Add(1)%7 != 0 {
				return hostile.Forward
			}
			_, _ = servers[0].Run(cmd)
			resets.Add(1)
			return hostile.HangUp
		}
		p := hostile.NewProxy(t, servers[0].Addr(), hook)
		c := addrClient(t, path, []string{p.Addr(), servers[1].Addr(), servers[2].Addr()})
		ctx := context.Background()
		var held [2]atomic.Int32
		var overlaps, unconfirmed, failed atomic.Int32
		var mu sync.Mutex
		var ownKeys []string
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := range 24 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 12 {
					if g%3 == 0 {
						k := g % 2
						key := fmt.Sprintf("lr:rtr:shared:%d", k)
						l, err := c.Acquire(ctx, key, redlock.WithWait(20*time.Second), redlock.WithBackoff(2*time.Millisecond, 10*time.Millisecond))
						if err != nil {
							errs <- fmt.Errorf("shared %d, goroutine %d: %w", k, g, err)
							return
						}
						if held[k].Add(1) > 1 {
							overlaps.Add(1)
						}
						time.Sleep(200 * time.Microsecond) // the subject: a hold long enough for an overlap to show
						held[k].Add(-1)
						if err := l.Release(ctx); err != nil {
							unconfirmed.Add(1)
						}
						continue
					}
					key := fmt.Sprintf("lr:rtr:own:%d:%d", g, i)
					l, err := c.TryAcquire(ctx, key, redlock.WithTTL(time.Minute))
					mu.Lock()
					ownKeys = append(ownKeys, key)
					mu.Unlock()
					if err != nil {
						failed.Add(1)
						continue
					}
					if err := l.Release(ctx); err != nil {
						unconfirmed.Add(1)
						continue
					}
					// Confirmed by a quorum: gone from at least that many
					// masters right now.
					gone := 0
					for _, s := range servers {
						if n, err := redis.Int(s.Do("EXISTS", key)); err == nil && n == 0 {
							gone++
						}
					}
					if gone < 2 {
						errs <- fmt.Errorf("%s: release confirmed, but the key is on %d of 3 masters", key, 3-gone)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if n := overlaps.Load(); n != 0 {
			t.Errorf("%d overlapping holds of a shared key", n)
		}
		t.Logf("%s: %d ran-then-reset, %d own attempts failed, %d releases unconfirmed", path, resets.Load(), failed.Load(), unconfirmed.Load())
		// Everything goes: failed attempts by their rollbacks, unconfirmed
		// releases by the finisher's retries (TTL is a minute: waiting 10 s
		// tells the two apart).
		keys := append(ownKeys, "lr:rtr:shared:0", "lr:rtr:shared:1")
		for i, s := range servers {
			for _, k := range keys {
				if !s.WaitAbsent(k, 10*time.Second) {
					v, _ := redis.String(s.Do("GET", k))
					t.Errorf("master %d still holds %s = %q", i, k, v)
				}
			}
		}
	})
}
