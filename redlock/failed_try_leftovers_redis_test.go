package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// A failed single attempt of a fair lock leaves no queue entry and no
// metadata on any master, and the next fair attempt is not kept waiting
// behind a ghost.
func TestFair_failedTryLeavesNoQueueEntry(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		c := rs.client(t, path)
		held, err := c.TryAcquire(ctx, "fq", redlock.WithFair())
		if err != nil {
			t.Fatal(err)
		}
		// The holder's own entry stays until its release or its expiry.
		holderID := queued(t, rs, "fq")
		for _, try := range []func() error{
			func() error {
				_, err := c.TryAcquire(ctx, "fq", redlock.WithFair(), redlock.WithMetadata("ghost"))
				return err
			},
			func() error {
				_, err := c.Acquire(ctx, "fq", redlock.WithFair(), redlock.WithMetadata("ghost"), redlock.WithWait(150*time.Millisecond))
				return err
			},
		} {
			if err := try(); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("fair attempt on a held key: %v", err)
			}
			start := time.Now()
			waitUntil(t, "no queue entry of the failed attempt left", func() bool { return onlyHolderQueued(t, rs, "fq", holderID) })
			t.Logf("the failed attempt's queue entry gone %v after it returned", time.Since(start))
			for i, s := range rs.servers {
				vals, err := redis.Strings(s.Do("HVALS", layout.MetaKey("fq")))
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range vals {
					if v == "ghost" {
						t.Fatalf("master %d keeps the failed attempt's metadata", i)
					}
				}
			}
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l, err := c.TryAcquire(ctx, "fq", redlock.WithFair())
		if err != nil {
			t.Fatalf("a fair TryAcquire on a free key after failed ones: %v", err)
		}
		_ = l.Release(ctx)
	})
}

// A failed TryAcquireWrite leaves no metadata of its own.
func TestRW_failedTryWriteLeavesNoMetadata(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		c := rs.client(t, path)
		r, err := c.TryAcquireRead(ctx, "wm")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquireWrite(ctx, "wm", redlock.WithMetadata("ghost")); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("TryAcquireWrite behind a reader: %v", err)
		}
		waitUntil(t, "no metadata of the failed writer", func() bool {
			for _, s := range rs.servers {
				vals, err := redis.Strings(s.Do("HVALS", layout.MetaKey("wm")))
				if err != nil {
					return false
				}
				for _, v := range vals {
					if v == "ghost" {
						return false
					}
				}
			}
			return true
		})
		_ = r.Release(ctx)
	})
}

// A reader turned away by a writer's intent: one "redlock: " prefix, the
// key once, for the single attempt and for a bounded wait.
func TestRW_writerWaitingMessage(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		c := rs.client(t, path)
		const key = "catalog-xyz"
		r, err := c.TryAcquireRead(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Release(ctx)
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = c.AcquireWrite(wctx, key)
		}()
		defer func() { stop(); <-done }()
		waitUntil(t, "the writer's intent on a quorum", func() bool { return count(rs.hget(t, key, "intent"), "") <= 1 })
		for name, call := range map[string]func() error{
			"TryAcquireRead": func() error { _, err := c.TryAcquireRead(ctx, key); return err },
			"AcquireRead with a wait": func() error {
				_, err := c.AcquireRead(ctx, key, redlock.WithWait(300*time.Millisecond))
				return err
			},
			"AcquireRead with a ctx deadline": func() error {
				dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				_, err := c.AcquireRead(dctx, key)
				return err
			},
		} {
			err := call()
			if !errors.Is(err, redlock.ErrWriterWaiting) || !errors.Is(err, redlock.ErrNotAcquired) {
				t.Errorf("%s: %v, want ErrWriterWaiting and ErrNotAcquired", name, err)
				continue
			}
			msg := err.Error()
			if strings.Count(msg, "redlock: ") != 1 || strings.Count(msg, key) != 1 {
				t.Errorf("%s: %q: want one prefix and the key once", name, msg)
			}
			t.Logf("%s: %s", name, msg)
		}
	})
}

// Masters that lie about their run_id (long, non-hex, oversized replies,
// trailing junk) are not identified, are not asked again and again, and
// do not stop the locks from working.
func TestIdentity_hostileRunIDs(t *testing.T) {
	good := strings.Repeat("0123456789abcdef", 3)[:40]
	replies := []string{
		"run_id:" + strings.Repeat("z", 60000) + "\r\n",        // long, non-hex, under the bound
		"run_id:" + good + "\r\n" + strings.Repeat("x", 2<<20), // over the guard's bulk limit
		"run_id:" + good + "\x00junk\r\n",                      // trailing junk
	}
	forEachPath(t, func(t *testing.T, path connPath) {
		t.Parallel() // its own masters and proxies, whose INFOs it counts
		rs := startReal(t, 3)
		var addrs []string
		var proxies []*hostile.Proxy
		for i, s := range rs.servers {
			reply := replies[i]
			p := hostile.NewProxy(t, s.Addr(), func(c *hostile.Conn, cmd []string) hostile.Verdict {
				if cmd[0] == "INFO" {
					_ = c.Write(fmt.Sprintf("$%d\r\n%s\r\n", len(reply), reply))
					return hostile.Swallow
				}
				return hostile.Forward
			})
			proxies = append(proxies, p)
			addrs = append(addrs, p.Addr())
		}
		c := addrClient(t, path, addrs)
		ctx := ctxT(t)
		deadline := time.Now().Add(2500 * time.Millisecond)
		n := 0
		for time.Now().Before(deadline) {
			l, err := c.TryAcquire(ctx, "h")
			if err != nil {
				t.Fatalf("call %d: %v", n, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			n++
			time.Sleep(20 * time.Millisecond)
		}
		for i, p := range proxies {
			infos := 0
			for _, s := range p.Seen() {
				if strings.HasPrefix(s, "INFO") {
					infos++
				}
			}
			t.Logf("master %d: %d INFO in %d calls", i, infos, n)
			// docs/operations.md: a master sending anything but a bounded
			// bulk reply with a well-formed run_id "is not identified and
			// not asked again".
			if infos != 1 {
				t.Errorf("master %d was asked INFO %d times in 2.5 s, want once", i, infos)
			}
		}
	})
}

// README's Do snippet: with WithWait(0) a second instance does not run the
// job; it gets ErrNotAcquired at once, its function never called.
func TestDo_noWaitDoesNotRunTheJobTwice(t *testing.T) {
	rs := startReal(t, 3)
	ctx := ctxT(t)
	c := rs.client(t, pipelinedPath)
	running, finish := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- c.Do(ctx, "reports:nightly", func(ctx context.Context) error {
			close(running)
			<-finish
			return nil
		}, redlock.WithWait(0))
	}()
	<-running
	ran := false
	start := time.Now()
	err := c.Do(ctx, "reports:nightly", func(ctx context.Context) error { ran = true; return nil }, redlock.WithWait(0))
	if !errors.Is(err, redlock.ErrNotAcquired) || ran || time.Since(start) > time.Second {
		t.Fatalf("second Do: %v after %v, ran %v; want ErrNotAcquired at once, the job not run", err, time.Since(start), ran)
	}
	close(finish)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// A failed fair TryAcquire while one master is SIGSTOPped: once it
// resumes, the entry the paused master queued is gone there too (taken
// back by the rollback or expired by its deadline), and how long that
// took is logged (the holder's own entry stays until its expiry).
func TestFair_failedTryWithAPausedMasterLeavesNoEntry(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		c := rs.client(t, path)
		held, err := c.TryAcquire(ctx, "fp", redlock.WithFair(), redlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		holderID := queued(t, rs, "fp")
		if err := rs.servers[2].Pause(); err != nil {
			t.Fatal(err)
		}
		_, err = c.TryAcquire(ctx, "fp", redlock.WithFair())
		if !errors.Is(err, redlock.ErrNotAcquired) {
			rs.servers[2].Resume()
			t.Fatalf("fair TryAcquire on a held key: %v", err)
		}
		time.Sleep(200 * time.Millisecond) // the subject: master 2 stays stopped for a spell
		if err := rs.servers[2].Resume(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		waitUntil(t, "no queue entry of the failed attempt after the resume", func() bool { return onlyHolderQueued(t, rs, "fp", holderID) })
		t.Logf("queue clean %v after the resume", time.Since(start))
		_ = held.Release(ctx)
	})
}

// queued returns the one waiter in key's queue on master 0.
//
// An acquisition returns at a quorum, so master 0 may answer a moment
// after it did: its queue is read until it holds an entry, at most 2 s.
func queued(t *testing.T, rs *realSet, key string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		ids, err := redis.Strings(rs.servers[0].Do("ZRANGE", layout.QueueKey(key), 0, -1))
		if err == nil && len(ids) == 1 {
			return ids[0]
		}
		if err != nil || len(ids) > 1 || time.Now().After(deadline) {
			t.Fatalf("queue of %s on master 0: %v, %v; want the holder alone", key, ids, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// onlyHolderQueued reports whether key's queue holds nothing but holder on
// every master.
func onlyHolderQueued(t *testing.T, rs *realSet, key, holder string) bool {
	t.Helper()
	for _, s := range rs.servers {
		ids, err := redis.Strings(s.Do("ZRANGE", layout.QueueKey(key), 0, -1))
		if err != nil {
			return false
		}
		for _, id := range ids {
			if id != holder {
				return false
			}
		}
	}
	return true
}

// A first call whose ctx ends during the run_id probe did not really ask
// the masters: the next call must probe again, not go unchecked for the
// next second (it took a lock on two masters that were one server).
func TestIdentity_probeAgainAfterAShortFirstCall(t *testing.T) {
	servers := redistest.Start(t, 2)
	port := strings.TrimPrefix(servers[0].Addr(), "127.0.0.1:")
	addrs := []string{servers[0].Addr(), servers[1].Addr(), "localhost:" + port}
	forEachPath(t, func(t *testing.T, path connPath) {
		c := addrClient(t, path, addrs)
		for _, d := range []time.Duration{time.Microsecond, 20 * time.Microsecond, 100 * time.Microsecond, 300 * time.Microsecond} {
			sctx, cancel := context.WithTimeout(context.Background(), d)
			_, err := c.TryAcquire(sctx, "win-k")
			cancel()
			t.Logf("first call (%v): %v", d, err)
		}
		l, err := c.TryAcquire(context.Background(), "win-k")
		if !errors.Is(err, redlock.ErrInvalid) {
			if l != nil {
				_ = l.Release(context.Background())
			}
			t.Fatalf("a call right after a short first call: %v (lock %v), want ErrInvalid", err, l != nil)
		}
	})
}

// An Acquire whose ctx ends while its attempt waits on masters that
// stopped (SIGSTOP) after refusing it before: no master answered the
// last attempt, so the error tells what they answered before it — held
// by another token — and matches ctx.Err().
func TestAcquire_ctxEndingAnUnansweredAttemptReportsTheOneBefore(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		holder := rs.client(t, path)
		l, err := holder.TryAcquire(ctx, "told", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		w := rs.client(t, path, redlock.WithTimeout(5*time.Second))
		var once sync.Once
		redlock.SetBeforeWait(w, func() {
			once.Do(func() {
				for i := range rs.servers {
					rs.pause(t, i)
				}
			})
		})
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err = w.Acquire(dctx, "told", redlock.WithTTL(time.Minute))
		if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire: %v, want ErrNotAcquired and context.DeadlineExceeded", err)
		}
		var qe *redlock.QuorumError
		if !errors.As(err, &qe) || len(qe.Refused) < 2 {
			t.Fatalf("Acquire: %v, want the refusals (at least two, enough to settle it) from before the masters stopped", err)
		}
		for i := range rs.servers {
			_ = rs.servers[i].Resume()
		}
		_ = l.Release(ctx)
	})
}
