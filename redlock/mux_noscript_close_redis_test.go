package redlock_test

// Attacks on the pipelined connections (mux.go) and on what round.go does
// with their replies, written by someone who did not build them: script
// caches flushed between rounds, masters that answer part of a batch and
// reset, stray replies of the expected shape, Close racing every call,
// masters that stop reading or are frozen past the stall bound. Each ends
// by checking the real masters for keys left behind.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/observe"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// keysOn returns every key on s (the tests' masters are their own).
func keysOn(t *testing.T, s *redistest.Server) []string {
	t.Helper()
	ks, err := redis.Strings(s.Do("KEYS", "*"))
	if err != nil {
		t.Fatalf("KEYS on %s: %v", s.Addr(), err)
	}
	return ks
}

// A master's script cache is flushed (SCRIPT FLUSH) and then some scripts
// come back into it (another client's EVAL fallback or SCRIPT LOAD), but
// not the acquisition's. An attempt's EVALSHA reaches the master while it
// is frozen, the caller gives up, and the rollback's EVALSHA is written
// behind it. On waking the master answers the acquisition NOSCRIPT and runs
// the rollback (its script is cached): nothing to delete. Before, the
// acquisition's EVAL fallback was submitted only then, behind the
// rollback, and granted the key: a failed attempt left it until its TTL.
func TestNoScript_fallbackDoesNotOvertakeTheRollback(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []redlock.LockOption
	}{
		{"fenced", []redlock.LockOption{redlock.WithFencing()}},
		{"fair", []redlock.LockOption{redlock.WithFair()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachPath(t, func(t *testing.T, path connPath) {
				rs := startReal(t, 1)
				srv := rs.servers[0]
				rec := &recorder{}
				c := rs.client(t, path, redlock.WithTimeout(300*time.Millisecond), redlock.WithObserver(rec))
				ctx := ctxT(t)
				// Dial and load the scripts.
				l, err := c.TryAcquire(ctx, "warm", tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
					t.Fatal(err)
				}
				for _, s := range []*scripts.Script{scripts.Release, scripts.Leave} {
					if _, err := srv.Do("SCRIPT", "LOAD", s.Source()); err != nil {
						t.Fatal(err)
					}
				}
				if err := srv.Pause(); err != nil {
					t.Fatal(err)
				}
				actx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
				_, err = c.TryAcquire(actx, "k", append(tc.opts, redlock.WithTTL(time.Minute))...)
				cancel()
				if !errors.Is(err, redlock.ErrNotAcquired) {
					srv.Resume()
					t.Fatalf("TryAcquire on a frozen master: %v, want ErrNotAcquired", err)
				}
				time.Sleep(100 * time.Millisecond) // the rollback is written
				if err := srv.Resume(); err != nil {
					t.Fatal(err)
				}
				// The master answers the acquisition before the rollback: once
				// the client has read the rollback's answer, it has read the
				// acquisition's, and what that submitted is in flight, which
				// Close waits for (a grace of one timeout).
				// A rollback that timed out (a busy machine) counts as failed
				// before the master answered anything: such a run tells
				// nothing.
				rolledBack := func(failed bool) bool {
					rec.mu.Lock()
					defer rec.mu.Unlock()
					for _, a := range rec.answers {
						if a.Op == "rollback" && (a.Answer == observe.AnswerFailed) == failed {
							return true
						}
					}
					return false
				}
				if !redistest.Within(10*time.Second, func() bool { return rolledBack(false) }) {
					if rolledBack(true) {
						t.Skip("the rollback timed out before the master answered it: the case did not occur")
					}
					t.Fatal("not within 10s: the client read the rollback's answer")
				}
				c.Close()
				if v, _ := redis.String(srv.Do("GET", "k")); v != "" {
					pttl, _ := redis.Int64(srv.Do("PTTL", "k"))
					t.Fatalf("a failed attempt left its key on the master (PTTL %d ms); keys: %q", pttl, keysOn(t, srv))
				}
			})
		})
	}
}

// After SCRIPT FLUSH a lone caller's command still runs (on an idle
// pipelined connection, EVAL goes next, in order), and a busy connection
// recovers: the script is loaded again behind what was in flight, so the
// commands that fail are only those already on their way at the flush.
// At the end every lock was released or expired: nothing is left but the
// fencing counters.
func TestNoScript_scriptFlushUnderLoadRecovers(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		ctx := ctxT(t)
		held, err := c.TryAcquire(ctx, "lone", redlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rs.servers {
			if _, err := s.Do("SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		if err := held.Release(ctx); err != nil {
			t.Fatalf("Release on idle connections after SCRIPT FLUSH: %v", err)
		}
		// Release returns at a quorum: the last master may still be
		// running its EVAL.
		waitUntil(t, "every master ran the release", func() bool {
			vals := rs.values(t, "lone")
			return count(vals, "") == len(vals)
		})

		const workers = 32
		stop := make(chan struct{})
		var failures [workers]int
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("load%d", w)
				for {
					select {
					case <-stop:
						return
					default:
					}
					l, err := c.TryAcquire(ctx, key, redlock.WithFencing(), redlock.WithTTL(2*time.Second))
					if err == nil {
						err = l.Release(ctx)
					}
					if err != nil {
						failures[w]++
					}
				}
			}()
		}
		time.Sleep(300 * time.Millisecond) // the subject: the load runs a while before the flush
		for _, s := range rs.servers {
			if _, err := s.Do("SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(700 * time.Millisecond) // the subject: the load goes on past the flush
		close(stop)
		wg.Wait()
		total := 0
		for _, n := range failures {
			total += n
		}
		t.Logf("calls that failed around the flush: %d", total)
		// Recovered: every master runs every script again, first time.
		for w := 0; w < workers; w++ {
			key := fmt.Sprintf("load%d", w)
			l, err := c.TryAcquire(ctx, key, redlock.WithFencing(), redlock.WithTTL(2*time.Second), redlock.WithWait(3*time.Second))
			if err != nil {
				t.Fatalf("%s after the flush: %v", key, err)
			}
			// TryAcquire returns at a quorum: the last master's grant may
			// still be on its way.
			waitUntil(t, key+" granted by every master after the flush", func() bool {
				return count(rs.values(t, key), "") == 0
			})
			if err := l.Release(ctx); err != nil {
				t.Fatalf("%s: Release after the flush: %v", key, err)
			}
		}
		// keys of releases that failed expire at their TTL (2 s)
		leftover.Within(t, 2*time.Second+leftover.Bound, rs.servers)
	})
}

// holders counts, per key, the goroutines that hold its lock, and reports
// two at once.
type holders struct {
	mu   sync.Mutex
	n    map[string]int
	both atomic.Int32
}

func (h *holders) enter(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[key]++
	if h.n[key] > 1 {
		h.both.Add(1)
	}
}

func (h *holders) leave(key string) {
	h.mu.Lock()
	h.n[key]--
	h.mu.Unlock()
}

// lockLoop takes, extends and releases locks on keys until stop closes or
// a call fails with ErrClosed; it returns how many calls failed otherwise.
func lockLoop(ctx context.Context, c *redlock.Client, h *holders, key string, ttl time.Duration, stop <-chan struct{}) (failed int) {
	for {
		select {
		case <-stop:
			return failed
		default:
		}
		l, err := c.TryAcquire(ctx, key, redlock.WithTTL(ttl))
		if errors.Is(err, redlock.ErrClosed) {
			return failed
		}
		if err != nil {
			failed++
			continue
		}
		h.enter(key)
		err = l.Extend(ctx, ttl)
		h.leave(key)
		if err2 := l.Release(ctx); err == nil {
			err = err2
		}
		if errors.Is(err, redlock.ErrClosed) {
			return failed
		}
		if err != nil {
			failed++
		}
	}
}

// Close while 64 goroutines lock, extend and unlock: every call returns
// (with ErrClosed or a quorum error), Close returns within a few per-master
// timeouts, nothing panics or races (-race; a WaitGroup Add concurrent with
// Wait would panic), no goroutine is left (goleak in TestMain), and the
// keys of locks Close cut short expire at their TTL.
func TestClose_racesEveryCall(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		addrs := make([]string, len(rs.servers))
		for i, s := range rs.servers {
			addrs[i] = s.Addr()
		}
		for rep := 0; rep < 3; rep++ {
			c := addrClient(t, path, addrs, redlock.WithTimeout(200*time.Millisecond))
			ctx := ctxT(t)
			var h holders
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for g := 0; g < 64; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					lockLoop(ctx, c, &h, fmt.Sprintf("c%d", g%16), time.Second, stop)
				}()
			}
			time.Sleep(time.Duration(50+100*rep) * time.Millisecond) // the subject: Close lands at a different moment each rep
			start := time.Now()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			returned := make(chan struct{})
			go func() { wg.Wait(); close(returned) }()
			select {
			case <-returned:
			case <-time.After(10 * time.Second):
				close(stop)
				t.Fatalf("calls still running 10 s after Close returned")
			}
			close(stop)
			if took > 2*time.Second {
				t.Errorf("Close took %v with a 200 ms per-master timeout", took)
			}
			if n := h.both.Load(); n > 0 {
				t.Errorf("two holders of one key at once, %d times", n)
			}
		}
		leftover.Within(t, time.Second+leftover.Bound, rs.servers) // the TTL of what Close cut short
	})
}

// One of three masters is frozen (SIGSTOP) for longer than the stall
// bound while 16 goroutines lock four keys, then woken. No two goroutines
// hold a key at once; the frozen master's connection is broken and the
// next one works (a fresh lock is granted on all three); whatever the
// frozen master ran late is gone within its TTL.
func TestMux_frozenPastTheStallBound(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		addrs := make([]string, len(rs.servers))
		for i, s := range rs.servers {
			addrs[i] = s.Addr()
		}
		// Stall bound: 10 × 100 ms, at least 1 s.
		c := addrClient(t, path, addrs, redlock.WithTimeout(100*time.Millisecond))
		ctx := ctxT(t)
		const ttl = 2 * time.Second
		var h holders
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var failed atomic.Int64
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				failed.Add(int64(lockLoop(ctx, c, &h, fmt.Sprintf("f%d", g%4), ttl, stop)))
			}()
		}
		time.Sleep(200 * time.Millisecond) // the subject: traffic before the freeze
		if err := rs.servers[0].Pause(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond) // the subject: frozen past the 1 s stall bound
		if err := rs.servers[0].Resume(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the subject: traffic after the thaw
		close(stop)
		wg.Wait()
		t.Logf("calls that failed: %d", failed.Load())
		if n := h.both.Load(); n > 0 {
			t.Errorf("two holders of one key at once, %d times", n)
		}
		waitUntil(t, "a fresh lock is granted on every master", func() bool {
			l, err := c.TryAcquire(ctx, "fresh", redlock.WithTTL(ttl))
			if err != nil {
				return false
			}
			all := count(rs.values(t, "fresh"), "") == 0
			l.Release(ctx)
			return all
		})
		c.Close()
		leftover.Within(t, ttl+leftover.Bound, rs.servers)
	})
}

// A master stops reading (SIGSTOP, shorter than the stall bound) while
// 6000 goroutines try to lock big keys: the writer blocks on the full
// socket, the queue fills, and the callers beyond it fail at once
// (errMuxBusy) rather than queue. After the master wakes everything
// returns and the connection carries on. No rollback is refused as busy:
// before, about 2200 were (their SETs, queued, ran later and left up to
// 1224 keys until their TTL); the queue now keeps room for them. Nothing
// is left after the TTL of what the master ran after a rollback failed
// otherwise (a stall break, see "Ordering on each master").
func TestMux_masterStopsReadingThenResumes(t *testing.T) {
	var logBuf syncBuffer
	srv := redistest.StartOne(t)
	c := addrClient(t, pipelinedPath, []string{srv.Addr()}, redigo.WithPoolOptions(pool.WithWriteTimeout(10*time.Second)),
		redlock.WithTimeout(300*time.Millisecond), redlock.WithLogger(slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelWarn})))) // stall bound 3 s
	// 6000 goroutines under -race on a loaded machine: more than ctxT's 10 s.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if l, err := c.TryAcquire(ctx, "warm"); err != nil {
		t.Fatal(err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	const ttl = 5 * time.Second
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("p", 2048)
	const callers = 6000
	var busy, granted, other, releaseBusy, releaseLate atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.TryAcquire(ctx, fmt.Sprintf("%s%d", pad, i), redlock.WithTTL(ttl))
			switch {
			case err == nil:
				granted.Add(1)
				// A granted lock's release queues behind thousands of
				// commands and may be refused as busy, or not answered
				// within its bound; the client then finishes it in the
				// background (checked below: nothing is left after the
				// TTL). Any other failure is an error.
				if err := l.Release(ctx); err != nil && strings.Contains(err.Error(), "too many commands queued") {
					releaseBusy.Add(1)
				} else if errors.Is(err, redlock.ErrNotReleased) && (errors.Is(err, redlock.ErrMasterTimeout) || errors.Is(err, context.DeadlineExceeded)) {
					releaseLate.Add(1)
				} else if err != nil {
					t.Errorf("Release: %v", err)
				}
			case strings.Contains(err.Error(), "too many commands queued"):
				busy.Add(1)
			default:
				other.Add(1)
			}
		}()
	}
	time.Sleep(700 * time.Millisecond) // the subject: the master stops reading for a spell, within the 3 s stall bound
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	t.Logf("granted %d (their releases refused as busy: %d, not answered in time: %d), refused as busy %d, failed otherwise %d",
		granted.Load(), releaseBusy.Load(), releaseLate.Load(), busy.Load(), other.Load())
	// Callers beyond the queue are refused as busy; since a connection
	// whose oldest command waited past the per-master timeout counts as
	// down, acquisitions sent then fail at once without being queued, so
	// the queue may not fill at all. Either way no caller waits on it, and
	// no rollback may be refused (below).
	// The master works through the queue (the SETs and their rollbacks),
	// then the connection takes new work again.
	woke := time.Now()
	var lastErr error
	waitUntil(t, "a lock works again", func() bool {
		l, err := c.TryAcquire(ctx, "after")
		if lastErr = err; err != nil {
			return false
		}
		return l.Release(ctx) == nil
	})
	t.Logf("a lock worked again %v after every caller returned (the last failure: %v)", time.Since(woke), lastErr)
	c.Close()
	refused := 0
	for _, line := range strings.Split(logBuf.String(), "\n") {
		if strings.Contains(line, "op=rollback") && strings.Contains(line, "too many commands queued") {
			refused++
		}
	}
	if refused > 0 {
		t.Errorf("%d rollbacks were refused as busy", refused)
	}
	left := len(keysOn(t, srv))
	t.Logf("keys on the master right after Close: %d", left)
	leftover.Within(t, ttl+leftover.Bound, []*redistest.Server{srv})
}

// A master answers a prefix of what a connection carries and then resets
// it: every 15th command on each of its first connections is not run
// (hangUp) or is run without a reply before the reset (ran). Everything
// unanswered is re-sent once, in order, on a new connection (pipelined)
// or retried (pooled). No two goroutines hold a key at once, every call
// returns, and nothing is left once the TTL of locks whose release the
// resets cost has passed.
func TestResend_prefixAnsweredThenReset(t *testing.T) {
	for _, ran := range []bool{false, true} {
		t.Run(fmt.Sprintf("ran=%v", ran), func(t *testing.T) {
			forEachPath(t, func(t *testing.T, path connPath) {
				reals := redistest.Start(t, 3)
				var mu sync.Mutex
				seen := map[*hostile.Conn]int{}
				fm := hostile.NewProxy(t, reals[0].Addr(), func(fc *hostile.Conn, cmd []string) hostile.Verdict {
					if fc.Index >= 20 || strings.EqualFold(cmd[0], "SCRIPT") {
						return hostile.Forward
					}
					mu.Lock()
					defer mu.Unlock()
					seen[fc]++
					switch {
					case seen[fc] == 15 && ran:
						return hostile.Swallow
					case seen[fc] == 15 || seen[fc] == 16 && ran:
						return hostile.HangUp
					}
					return hostile.Forward
				})
				c := addrClient(t, path, []string{fm.Addr(), reals[1].Addr(), reals[2].Addr()},
					redlock.WithTimeout(300*time.Millisecond))
				ctx := ctxT(t)
				const ttl = 2 * time.Second
				var h holders
				var wg sync.WaitGroup
				stop := make(chan struct{})
				for g := 0; g < 32; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						lockLoop(ctx, c, &h, fmt.Sprintf("r%d", g%8), ttl, stop)
					}()
				}
				time.Sleep(1500 * time.Millisecond) // the subject: a spell of load across the resets
				close(stop)
				wg.Wait()
				t.Logf("connections the fake master accepted: %d", fm.Accepted())
				if n := h.both.Load(); n > 0 {
					t.Errorf("two holders of one key at once, %d times", n)
				}
				if fm.Accepted() < 3 {
					t.Errorf("only %d connections: the resets did not happen", fm.Accepted())
				}
				c.Close()
				leftover.Within(t, ttl+leftover.Bound, reals)
			})
		})
	}
}

// The connection dies while the dial loads the scripts (the master
// resets it at the third SCRIPT LOAD), and the next one right after the
// dial, at its first command, while 16 callers wait in the backlog. Every
// call returns within its context, the connection after works, and no key
// is left once the TTL has passed.
func TestMuxDial_deathDuringAndRightAfterDial(t *testing.T) {
	real := redistest.StartOne(t)
	var mu sync.Mutex
	loads := map[*hostile.Conn]int{}
	fm := hostile.NewProxy(t, real.Addr(), func(fc *hostile.Conn, cmd []string) hostile.Verdict {
		mu.Lock()
		defer mu.Unlock()
		script := strings.EqualFold(cmd[0], "SCRIPT")
		if script {
			loads[fc]++
		}
		switch {
		case fc.LockIndex == 0 && script && loads[fc] == 3:
			return hostile.HangUp
		case fc.LockIndex == 1 && !script:
			return hostile.HangUp
		}
		return hostile.Forward
	})
	c := addrClient(t, pipelinedPath, []string{fm.Addr()}, redlock.WithTimeout(300*time.Millisecond))
	const ttl = 2 * time.Second
	wave := func(name string) (granted int32) {
		var wg sync.WaitGroup
		var n atomic.Int32
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				start := time.Now()
				l, err := c.TryAcquire(ctx, fmt.Sprintf("%s%d", name, i), redlock.WithTTL(ttl))
				if d := time.Since(start); d > 2*time.Second+500*time.Millisecond {
					t.Errorf("TryAcquire returned after %v with a 2 s context", d)
				}
				if err != nil {
					return
				}
				n.Add(1)
				if err := l.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
			}()
		}
		wg.Wait()
		return n.Load()
	}
	// The first dial fails: its backlog fails with it, and for the redial
	// delay (1 s here) so does every call.
	t.Logf("first wave (dial dies): %d of 16 granted", wave("a"))
	time.Sleep(1100 * time.Millisecond) // the subject: the redial delay (1 s) passes
	// The second dial works and its connection dies at the first command
	// without running it: the backlog is re-sent, in order, on a third.
	if n := wave("b"); n != 16 {
		t.Errorf("second wave (connection dies after the dial): %d of 16 granted, want all", n)
	}
	t.Logf("connections: %d", fm.Accepted())
	ctx := ctxT(t)
	waitUntil(t, "a lock works on a healthy connection", func() bool {
		l, err := c.TryAcquire(ctx, "after", redlock.WithTTL(ttl))
		return err == nil && l.Release(ctx) == nil
	})
	c.Close()
	if ks := keysOn(t, real); len(ks) > 0 {
		t.Logf("keys right after Close: %q", ks)
	}
	leftover.Within(t, ttl+leftover.Bound, []*redistest.Server{real})
}

// A hostile master (1 of 3) injects a stray "+OK" ahead of its real reply
// to a SET of a key that another client holds on every master. The limit
// (see "Pipelining"): that OK has the SET's own shape and counts as a
// grant. It is one master's false vote: with the two honest masters
// refusing, there is no quorum, and the shift is caught at the next reply
// (the real nil arrives for the rollback, which allows only 1 or 0), so no
// later reply on that connection counts either. The holder keeps its key
// on every master, and the contender gets the lock once it is released.
func TestMux_sameShapeStrayIsOneFalseVote(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		reals := redistest.Start(t, 3)
		var injected atomic.Bool
		fm := hostile.NewProxy(t, reals[0].Addr(), func(fc *hostile.Conn, cmd []string) hostile.Verdict {
			if strings.EqualFold(cmd[0], "SET") && cmd[1] == "s" && cmd[2] != "" && injected.CompareAndSwap(false, true) {
				fc.Write("+OK\r\n")
			}
			return hostile.Forward
		})
		addrs := []string{fm.Addr(), reals[1].Addr(), reals[2].Addr()}
		ctx := ctxT(t)
		holder := addrClient(t, path, []string{reals[0].Addr(), reals[1].Addr(), reals[2].Addr()})
		a, err := holder.TryAcquire(ctx, "s", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		// The holder returns at a quorum: wait until the key is on every
		// master, or the contender could win the last one honestly and,
		// with the stray vote, hold a bare quorum (the limit documented).
		waitUntil(t, "the holder's key is on every master", func() bool {
			for _, s := range reals {
				if v, _ := redis.String(s.Do("GET", "s")); v != a.Token() {
					return false
				}
			}
			return true
		})
		mon := reals[0].Monitor(t)
		contender := addrClient(t, path, addrs, redlock.WithTimeout(realTimeout))
		// Dial first, so that the SET is not the first command.
		if l, err := contender.TryAcquire(ctx, "other"); err != nil {
			t.Fatal(err)
		} else if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if l, err := contender.TryAcquire(ctx, "s"); err == nil {
			l.Release(ctx)
			t.Fatalf("the contender got a lock held on every master")
		} else if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire: %v, want ErrNotAcquired", err)
		}
		// The attempt may have failed on the honest masters before the
		// hostile one read its SET.
		waitUntil(t, "the stray reply is injected", injected.Load)
		// The rollback (the release script on s) runs behind the SET.
		waitUntil(t, "master 0 ran the contender's rollback", func() bool {
			for _, cmd := range mon.Commands() {
				if len(cmd) > 3 && strings.HasPrefix(strings.ToUpper(cmd[0]), "EVAL") && cmd[3] == "s" {
					return true
				}
			}
			return false
		})
		time.Sleep(200 * time.Millisecond) // the subject: a spell in which the replies after the stray must not change the key
		tok := a.Token()
		for _, s := range reals {
			if v, _ := redis.String(s.Do("GET", "s")); v != tok {
				t.Fatalf("the holder's key was changed on %s: %q", s.Addr(), v)
			}
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l, err := contender.Acquire(ctx, "s", redlock.WithWait(5*time.Second))
		if err != nil {
			t.Fatalf("after the release: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		contender.Close()
		holder.Close()
		leftover.None(t, reals)
	})
}
