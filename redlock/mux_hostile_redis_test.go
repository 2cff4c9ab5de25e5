package redlock_test

// Masters that misbehave at the protocol level, on fake masters in Go in
// front of real redis-servers: stray replies, slow and stalled masters,
// dropped connections, and what the client must do about each, on the
// connection path where it matters (both where both can meet it).

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
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// sleepOr waits d unless done closes first.
func sleepOr(d time.Duration, done <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-done:
	}
}

// One stray reply (a proxy injecting one) puts a connection one reply out
// of step. Before, the next replies each went to the command after their
// own, for good: a release's 1 became the grant of a key that another
// client held. Every reply is now checked against what its command can
// return; the first that does not fit fails the connection (pipelined)
// or keeps it out of the pool (pooled), and never counts as a vote.
func TestHostile_strayReplyNeverGrantsAHeldKey(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		real := redistest.StartOne(t)
		if _, err := real.Do("SET", "held", "another-client"); err != nil {
			t.Fatal(err)
		}
		var injected atomic.Bool
		fm := hostile.NewProxy(t, real.Addr(), func(fc *hostile.Conn, cmd []string) hostile.Verdict {
			if strings.EqualFold(cmd[0], "SET") && injected.CompareAndSwap(false, true) {
				fc.Write("+OK\r\n") // a stray reply, ahead of the real one
			}
			return hostile.Forward
		})
		c := addrClient(t, path, []string{fm.Addr()}, redlock.WithTimeout(realTimeout))
		ctx := ctxT(t)
		l, err := c.TryAcquire(ctx, "free")
		if err != nil {
			t.Fatal(err)
		}
		// The stray reply granted the lock before the proxy forwarded the
		// SET; on a busy host the SET may still be on its way, and a
		// release sent again on a fresh connection could overtake it.
		waitUntil(t, "the SET on the master", func() bool {
			n, err := redis.Int(real.Do("EXISTS", "free"))
			return err == nil && n == 1
		})
		// The release reads the SET's "OK", which no release returns: the
		// connection is out of step and fails. The release, a
		// token-checked script, may be sent again on a fresh connection
		// and succeed; else it is reported as not released, saying why.
		err = l.Release(ctx)
		switch {
		case err == nil:
			leftover.None(t, []*redistest.Server{real}, "free")
		case !errors.Is(err, redlock.ErrNotReleased) || !strings.Contains(err.Error(), "out of step"):
			t.Errorf("release after the stray reply: %v, want success or ErrNotReleased saying the connection is out of step", err)
		}
		l2, err := c.TryAcquire(ctx, "held")
		if err == nil {
			t.Fatalf("a key another client holds was granted (token %s)", l2.Token())
		}
		var qe *redlock.QuorumError
		if !errors.As(err, &qe) || len(qe.Refused) != 1 {
			t.Errorf("acquire of a held key: %v, want a refusal", err)
		}
	})
}

// A master that answers every command correctly but 200 ms late, with a
// long queue of commands: Close returns within about one per-master
// timeout (it used to drain the queue reply by reply), and what was still
// pending fails with ErrClosed.
func TestHostile_closeIsBoundedBehindASlowMaster(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		real := redistest.StartOne(t)
		fm := hostile.NewProxy(t, real.Addr(), func(fc *hostile.Conn, cmd []string) hostile.Verdict {
			if !strings.EqualFold(cmd[0], "SCRIPT") {
				sleepOr(200*time.Millisecond, fc.Quit())
			}
			return hostile.Forward
		})
		var buf syncBuffer
		const timeout = 300 * time.Millisecond
		c := addrClient(t, path, []string{fm.Addr()}, redlock.WithTimeout(timeout),
			redlock.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		ctx := ctxT(t)
		var wg sync.WaitGroup
		for i := 0; i < 60; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if l, err := c.TryAcquire(ctx, fmt.Sprintf("k%d", i)); err == nil {
					l.Release(ctx)
				}
			}()
		}
		wg.Wait()
		start := time.Now()
		closed := make(chan struct{})
		go func() { c.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * timeout):
			t.Fatalf("Close still blocked after %v (per-master timeout %v)", time.Since(start), timeout)
		}
		t.Logf("Close took %v", time.Since(start))
		// The master's error, in its *NodeError: "master 0 (addr): client closed".
		if path.pipelined && !strings.Contains(buf.String(), "): "+strings.TrimPrefix(redlock.ErrClosed.Error(), "redlock: ")) {
			t.Errorf("no pending command failed with ErrClosed; log:\n%.2000s", buf.String())
		}
	})
}

// A master that answers every command, each 200 ms late: the replies keep
// coming, but the oldest command waiting for one grows older. The
// connection is broken once it is older than the stall bound (10 × the
// per-master timeout, at least 1 s), not when the whole queue has been
// answered.
func TestHostile_oldestPendingCommandBreaksASlowConnection(t *testing.T) {
	real := redistest.StartOne(t)
	fm := hostile.NewProxy(t, real.Addr(), func(fc *hostile.Conn, cmd []string) hostile.Verdict {
		if fc.LockIndex >= 0 && !strings.EqualFold(cmd[0], "SCRIPT") {
			sleepOr(200*time.Millisecond, fc.Quit())
		}
		return hostile.Forward
	})
	c := addrClient(t, pipelinedPath, []string{fm.Addr()}, redlock.WithTimeout(100*time.Millisecond))
	ctx := ctxT(t)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.TryAcquire(ctx, fmt.Sprintf("k%d", i)) // fails: the master is too slow
		}()
	}
	waitUntil(t, "the pipelined connection is accepted", func() bool { return fm.LockConn(0) != nil })
	select {
	case <-fm.LockConn(0).Gone():
		// 200 commands queued at 200 ms each would take 40 s to answer.
	case <-time.After(6 * time.Second):
		t.Fatalf("the connection was not broken; the master answered %d commands", len(fm.LockConn(0).Commands()))
	}
}

// A failed attempt returns when its context ends, even while the rollback
// on a master that granted is still waiting for its reply (it used to wait
// for the per-master timeout); the rollback completes in the background.
func TestHostile_failedAttemptReturnsAtItsContextDeadline(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		reals := redistest.Start(t, 3)
		hold := make(chan struct{})
		granter := hostile.NewProxy(t, reals[0].Addr(), func(fc *hostile.Conn, cmd []string) hostile.Verdict {
			if strings.EqualFold(cmd[0], "EVALSHA") || strings.EqualFold(cmd[0], "EVAL") {
				select { // the rollback
				case <-hold:
				case <-fc.Quit():
				}
			}
			return hostile.Forward
		})
		addrs := []string{granter.Addr()}
		for _, r := range reals[1:] {
			if _, err := r.Do("SET", "k", "another-client"); err != nil {
				t.Fatal(err)
			}
			// The refusals come after the grant.
			slow := hostile.NewProxy(t, r.Addr(), func(fc *hostile.Conn, cmd []string) hostile.Verdict {
				if strings.EqualFold(cmd[0], "SET") {
					sleepOr(50*time.Millisecond, fc.Quit())
				}
				return hostile.Forward
			})
			addrs = append(addrs, slow.Addr())
		}
		const timeout = 3 * time.Second
		c := addrClient(t, path, addrs, redlock.WithTimeout(timeout))
		ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.TryAcquire(ctx, "k", redlock.WithTTL(time.Minute))
		took := time.Since(start)
		if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire: %v", err)
		}
		if took > time.Second+300*time.Millisecond {
			t.Errorf("TryAcquire with a 300ms context returned after %v (per-master timeout %v)", took, timeout)
		}
		t.Logf("returned after %v", took)
		close(hold)
		waitUntil(t, "the rollback removed the key", func() bool {
			n, err := redis.Int(reals[0].Do("EXISTS", "k"))
			return err == nil && n == 0
		})
	})
}

// A master drops the connection (a reset) while a lock's SET, another
// command and then the lock's release are on it, unanswered: the SET and
// the big command written, the release still queued behind the write.
// Before, the written ones were re-sent by the reader and the queued one
// by the writer, concurrently, so the release could reach the new
// connection before its SET and leave the key until its TTL. Everything
// still unanswered is now re-sent once, in its original order.
func TestHostile_droppedConnectionIsResentInOrder(t *testing.T) {
	reals := redistest.Start(t, 3)
	for round := 0; round < 2; round++ {
		key := fmt.Sprintf("k%d", round)
		drop := make(chan struct{})
		fm := hostile.NewProxy(t, reals[0].Addr(), func(fc *hostile.Conn, cmd []string) hostile.Verdict {
			if fc.LockIndex == 0 && strings.EqualFold(cmd[0], "SET") && cmd[1] == key {
				// Read the SET, then stop reading until told to hang up.
				select {
				case <-drop:
				case <-fc.Quit():
				}
				return hostile.HangUp
			}
			return hostile.Forward
		})
		// Writing the big command again, through the fake master, may
		// take longer than the default write timeout. The per-master
		// timeout outlasts the steps up to the drop on a busy machine: a
		// SET past its deadline by then is failed, not re-sent.
		c := addrClient(t, pipelinedPath, []string{fm.Addr(), reals[1].Addr(), reals[2].Addr()},
			redigo.WithPoolOptions(pool.WithWriteTimeout(time.Minute)), redlock.WithTimeout(5*time.Second))
		ctx := ctxT(t)
		l, err := c.Acquire(ctx, key, redlock.WithTTL(time.Minute)) // granted by masters 1 and 2
		if err != nil {
			t.Fatal(err)
		}
		// A command too big for the socket buffers: the writer blocks on
		// it, since the fake master reads no more.
		big := strings.Repeat("x", 16<<20)
		bigDone := make(chan struct{})
		go func() {
			defer close(bigDone)
			if lb, err := c.TryAcquire(ctx, big); err == nil {
				lb.Release(ctx)
			}
		}()
		time.Sleep(300 * time.Millisecond)
		if err := l.Release(ctx); err != nil { // masters 1 and 2 confirm
			t.Fatal(err)
		}
		close(drop)
		dropped := time.Now()
		<-bigDone
		// The re-sent big command passes through the fake master's parser
		// before the release does: seconds on a busy machine.
		// The new connection is any after the first: a waiter's
		// subscriber may have taken the second.
		var newConn *hostile.Conn
		resent := redistest.Within(30*time.Second, func() bool {
			for i := 1; fm.LockConn(i) != nil; i++ {
				set, rel := false, false
				for _, s := range fm.LockConn(i).Commands() {
					set = set || s == "SET "+key
					rel = rel || (strings.HasPrefix(s, "EVALSHA ") && strings.HasSuffix(s, " "+key))
				}
				if set && rel {
					newConn = fm.LockConn(i)
					return true
				}
			}
			return false
		})
		if !resent {
			var seen []string
			for i := 0; fm.LockConn(i) != nil; i++ {
				for _, s := range fm.LockConn(i).Commands() {
					seen = append(seen, fmt.Sprintf("conn %d: %.60s", i, s))
				}
			}
			t.Fatalf("round %d: not within 30 s of the drop: the SET and the release on a new connection; the fake master read %q", round, seen)
		}
		t.Logf("round %d: the SET and the release re-sent %v after the drop", round, time.Since(dropped).Round(time.Millisecond))
		// The proxy lists a command once it read it, before master 0 ran
		// it, and the release returned at the quorum of the other two: the
		// release may not have run there yet. A SET run after it would keep
		// the key its TTL, a minute: far past the wait.
		if !reals[0].WaitAbsent(key, 5*time.Second) {
			v, _ := redis.String(reals[0].Do("GET", key))
			t.Fatalf("round %d: the released lock is left on master 0 (%q); it saw, on the new connection: %q",
				round, v, newConn.Commands())
		}
	}
}

// A connection the client breaks itself (here: the master stopped
// answering, though it runs every command) fails what it carried as
// unknown; none of it is re-sent. Before, some of the written commands
// read "use of closed network connection", taken for a connection the
// master had closed, and were sent a second time.
func TestHostile_ownBreakIsNotResent(t *testing.T) {
	var wg sync.WaitGroup
	fms := make([]*hostile.Proxy, 4)
	for i := range fms {
		real := redistest.StartOne(t)
		fms[i] = hostile.NewProxy(t, real.Addr(), func(fc *hostile.Conn, cmd []string) hostile.Verdict {
			if fc.LockIndex == 0 && !strings.EqualFold(cmd[0], "SCRIPT") {
				return hostile.Swallow // runs it, answers nothing
			}
			return hostile.Forward
		})
		c := addrClient(t, pipelinedPath, []string{fms[i].Addr()}, redlock.WithTimeout(100*time.Millisecond))
		for j := 0; j < 20; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.TryAcquire(ctxT(t), fmt.Sprintf("k%d", j))
			}()
		}
	}
	wg.Wait()
	for i, fm := range fms {
		select {
		case <-fm.LockConn(0).Gone(): // broken after the stall bound (1 s)
		case <-time.After(10 * time.Second):
			t.Fatalf("master %d: the stalled connection was not broken", i)
		}
	}
	time.Sleep(200 * time.Millisecond) // the subject: a spell in which a re-send would come
	for i, fm := range fms {
		seen := map[string]int{}
		for _, s := range fm.Seen() {
			if strings.HasPrefix(s, "SET ") {
				seen[s]++
			}
		}
		for s, n := range seen {
			if n > 1 {
				t.Errorf("master %d: %q sent %d times", i, s, n)
			}
		}
	}
}

// A client mixing a pooled master (a pool of one's own that cannot dial)
// with a pipelined one, whose master hangs up on every command: each call fails that
// master, never panics. Before, a caller waiting for a dial could find
// the new connection already closed and get neither a connection nor an
// error.
func TestHostile_mixedMastersSurviveConnectionsThatDieAtOnce(t *testing.T) {
	reals := redistest.Start(t, 2)
	fm := hostile.NewProxy(t, reals[1].Addr(), func(fc *hostile.Conn, cmd []string) hostile.Verdict {
		if strings.EqualFold(cmd[0], "SCRIPT") {
			return hostile.Forward
		}
		return hostile.HangUp
	})
	plain := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", reals[0].Addr()) }}
	t.Cleanup(func() { plain.Close() })
	piped, err := pool.New(fm.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { piped.Close() })
	c, err := redigo.New([]pool.Pool{plainPool{plain}, piped}, redlock.WithTimeout(realTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 8; j++ {
				_, err := c.TryAcquire(ctx, fmt.Sprintf("k%d-%d", i, j))
				var qe *redlock.QuorumError
				if !errors.As(err, &qe) || qe.Failed == nil || !strings.Contains(qe.Failed.Error(), fm.Addr()) {
					t.Errorf("TryAcquire: %v, want master %s failed", err, fm.Addr())
					return
				}
			}
		}()
	}
	wg.Wait()
}
