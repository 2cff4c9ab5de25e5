package redlock_test

// Releases and rollbacks that a master did not confirm are finished in the
// background: the key frees on that master as soon as it
// answers again, not at its TTL, and the caller's answer is unchanged.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// startDB1 starts n masters whose pools select database 1 on every new
// connection: a dial needs the master's answer (as with a password), so a
// paused master gets no command on a new pooled connection, only on one
// the pool already holds. That is how a command goes missing under load:
// the connection cannot be had in time, and nothing is sent.
func startDB1(t *testing.T, n int) *realSet {
	t.Helper()
	rs := &realSet{servers: redistest.Start(t, n)}
	for _, s := range rs.servers {
		rs.pools = append(rs.pools, s.Pool(pool.WithDB(1)))
	}
	return rs
}

// db1 runs cmd on key in database 1 of master i (in a script: SELECT in
// a script is the script's own).
func (rs *realSet) db1(t *testing.T, i int, cmd, key string, args ...any) any {
	t.Helper()
	v, err := rs.servers[i].Do("EVAL", append([]any{"redis.call('SELECT', 1) return redis.call(ARGV[1], KEYS[1], unpack(ARGV, 2))",
		1, key, cmd}, args...)...)
	if err != nil {
		t.Fatalf("%s %s on master %d: %v", cmd, key, i, err)
	}
	return v
}

func (rs *realSet) db1Exists(t *testing.T, i int, key string) bool {
	t.Helper()
	n, _ := redis.Int(rs.db1(t, i, "EXISTS", key), nil)
	return n == 1
}

// freedWithin waits until key is gone from master i, well before its TTL.
func (rs *realSet) freedWithin(t *testing.T, i int, key string, d time.Duration) {
	t.Helper()
	start := time.Now()
	if !redistest.Within(d, func() bool { return !rs.db1Exists(t, i, key) }) {
		pttl, _ := redis.Int(rs.db1(t, i, "PTTL", key), nil)
		t.Fatalf("%q is still on master %d %v after it answered again (PTTL %d ms): the missed command was not finished",
			key, i, d, pttl)
	}
	t.Logf("%q gone from master %d %v after it resumed", key, i, time.Since(start).Round(time.Millisecond))
}

// pauseMaster pauses master i and resumes it at the end of the test if
// the test did not.
func pauseMaster(t *testing.T, rs *realSet, i int) (resume func()) {
	t.Helper()
	if err := rs.servers[i].Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			if err := rs.servers[i].Resume(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)
	return resume
}

// A lock extended and then released while one master is frozen: the
// caller gets nil (a quorum released it); the frozen master, once it
// answers again, loses the key within seconds rather than at its 30 s
// TTL. (Pipelined, both commands wait on the master's connection and run
// when it resumes; pooled, the extension's connection timed out and the
// release could get no connection.)
func TestRelease_missedByAMasterIsFinished(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startDB1(t, 3)
		c := rs.client(t, path)
		ctx := ctxT(t)
		l, err := c.Acquire(ctx, "job", redlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "every master holds the lock", func() bool { return rs.db1Exists(t, 2, "job") })
		resume := pauseMaster(t, rs, 2)
		if err := l.Extend(ctx, 30*time.Second); err != nil {
			t.Fatalf("Extend with a quorum: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release with a quorum: %v", err)
		}
		// Pooled, the release gets no connection and fails; pipelined,
		// both commands wait on master 2's connection.
		if path.pipelined {
			time.Sleep(3 * realTimeout) // the subject: master 2 stays frozen past the commands' deadlines
		} else {
			waitUntil(t, "master 2's release failed and waits for a retry", func() bool { return redlock.Finishing(c) == 1 })
		}
		resume()
		rs.freedWithin(t, 2, "job", 5*time.Second)
	})
}

// A failed acquisition whose SET reached a frozen master but whose
// rollback could not: once the master answers, the key goes.
func TestFinish_rollbackMissedByAMasterIsFinished(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startDB1(t, 3)
		for i := 0; i < 2; i++ {
			rs.db1(t, i, "SET", "job", "other", "PX", 60000)
		}
		c := rs.client(t, path)
		ctx := ctxT(t)
		// One connection per master, ready in the pool.
		warm, err := c.Acquire(ctx, "warm")
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
		resume := pauseMaster(t, rs, 2)
		if _, err := c.TryAcquire(ctx, "job", redlock.WithTTL(30*time.Second)); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire against another holder: %v", err)
		}
		// Pooled, the SET times out and its rollback gets no connection;
		// pipelined, both wait on master 2's connection.
		if path.pipelined {
			time.Sleep(3 * realTimeout) // the subject: master 2 stays frozen past the SET's and the rollback's deadlines
		} else {
			waitUntil(t, "master 2's rollback failed and waits for a retry", func() bool { return redlock.Finishing(c) == 1 })
		}
		resume()
		rs.freedWithin(t, 2, "job", 5*time.Second)
	})
}

// The pipelined connection to a frozen master is broken by the stall
// bound; a release submitted after that cannot reach the master (the
// redial gets no answer) and fails at once. It is sent again once the
// master answers.
func TestRelease_afterStallBrokenConnectionIsFinished(t *testing.T) {
	rs := startDB1(t, 3)
	c := rs.client(t, pipelinedPath, redlock.WithTimeout(200*time.Millisecond)) // stall bound 2 s
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "job", redlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every master holds the lock", func() bool { return rs.db1Exists(t, 2, "job") })
	resume := pauseMaster(t, rs, 2)
	if err := l.Extend(ctx, 30*time.Second); err != nil {
		t.Fatalf("Extend with a quorum: %v", err)
	}
	waitUntil(t, "the stall bound broke the connection to master 2", func() bool {
		_, _, conns := c.Sizes()
		return conns == 2
	})
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with a quorum: %v", err)
	}
	waitUntil(t, "the redial for the release gave up: it waits for a retry", func() bool { return redlock.Finishing(c) == 1 })
	resume()
	rs.freedWithin(t, 2, "job", 5*time.Second)
}

// The trap: a reentrant owner's every hold uses the same token, so a
// background retry of its release must never run after the owner's next
// acquisition on that master: it would delete the new hold. The retry of
// a release that master 2 missed is dropped once the owner acquires again.
func TestFinish_neverDeletesTheOwnersNextHold(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, path connPath) {
		t.Parallel() // its own masters and client; waits bounded from below only
		rs := startDB1(t, 3)
		c := rs.client(t, path, redlock.WithTimeout(200*time.Millisecond))
		// Retries 1.5 s apart: one is due after the owner's new hold has
		// reached master 2 below.
		redlock.SetFinishBackoff(c, 1500*time.Millisecond, 1500*time.Millisecond)
		ctx := ctxT(t)
		a, err := c.NewReentrant("lock", "owner-a", redlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "every master holds the lock", func() bool { return rs.db1Exists(t, 2, "lock") })
		resume := pauseMaster(t, rs, 2)
		if err := a.Release(ctx); err != nil {
			t.Fatalf("Release with a quorum: %v", err)
		}
		waitUntil(t, "master 2's release failed and waits for a retry", func() bool { return redlock.Finishing(c) == 1 })
		// The owner takes the lock again (on masters 0 and 1): the retry
		// of its old release is dropped. The round drops it before it
		// sends, so a try that missed the quorum drops it too.
		reacquire(t, ctx, a, "the owner takes the lock again on masters 0 and 1")
		waitUntil(t, "the retry was dropped", func() bool { return redlock.Finishing(c) == 0 })
		resume()
		// Take it once more until master 2 has the hold too.
		waitUntil(t, "master 2 has the owner's hold", func() bool {
			reacquire(t, ctx, a, "the owner takes the lock once more")
			v, _ := redis.String(rs.db1(t, 2, "HGET", "lock", "owner-a"), nil)
			return v != ""
		})
		time.Sleep(4 * time.Second) // the subject: two retries' worth of time, in which none may come
		if v, _ := redis.String(rs.db1(t, 2, "HGET", "lock", "owner-a"), nil); v == "" {
			t.Fatal("a retry of the owner's old release deleted its new hold on master 2")
		}
		for a.Count() > 0 {
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// reacquire takes a reentrant lock once more, trying again while a try
// misses the quorum: with one master frozen, both others must answer
// within the per-master timeout, which a busy machine can exceed.
func reacquire(t *testing.T, ctx context.Context, r *redlock.Reentrant, what string) {
	t.Helper()
	var err error
	waitUntil(t, what, func() bool {
		err = r.Acquire(ctx)
		if err != nil && !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("%s: %v", what, err)
		}
		return err == nil
	})
}

// Close with retries pending returns promptly and leaves no goroutine.
func TestFinish_closeStopsPendingFinishes(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startDB1(t, 3)
		ignore := goleak.IgnoreCurrent()
		c, err := redigo.New(rs.pools, redlock.WithTimeout(200*time.Millisecond), path.Option())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := ctxT(t)
		l, err := c.Acquire(ctx, "job", redlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// Acquire returns at a quorum: master 2 must hold the lock too
		// before it stops, for its release to be left to a retry.
		waitUntil(t, "every master holds the lock", func() bool {
			for i := range rs.servers {
				if !rs.db1Exists(t, i, "job") {
					return false
				}
			}
			return true
		})
		resume := pauseMaster(t, rs, 2)
		defer resume()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release with a quorum: %v", err)
		}
		waitUntil(t, "master 2's release waits for a retry", func() bool { return redlock.Finishing(c) == 1 })
		start := time.Now()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		t.Logf("Close took %v", took)
		if took > 2*time.Second {
			t.Errorf("Close took %v with a retry pending", took)
		}
		if n := redlock.Finishing(c); n != 0 {
			t.Errorf("%d retries pending after Close", n)
		}
		goleak.VerifyNone(t, ignore)
	})
}

// At most a bounded number of retries wait per client: beyond it, new
// ones are refused with a log line (the key then expires at its TTL).
func TestFinish_boundedInNumber(t *testing.T) {
	t.Parallel()
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startDB1(t, 3)
		var logs syncBuffer
		c := rs.client(t, path, redlock.WithTimeout(200*time.Millisecond),
			redlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		redlock.SetFinishLimit(c, 2)
		ctx := ctxT(t)
		var locks []*redlock.Lock
		for _, k := range []string{"a", "b", "c", "d"} {
			l, err := c.Acquire(ctx, k, redlock.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, l)
		}
		// Acquire returns at a quorum: master 2 must hold every lock too
		// before it stops, for each release there to be left to a retry.
		waitUntil(t, "every master holds every lock", func() bool {
			for i := range rs.servers {
				for _, k := range []string{"a", "b", "c", "d"} {
					if !rs.db1Exists(t, i, k) {
						return false
					}
				}
			}
			return true
		})
		pauseMaster(t, rs, 2)
		for _, l := range locks {
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release with a quorum: %v", err)
			}
		}
		// Master 2's four misses make two retries over the limit; a busy
		// host may make another master miss one too, so at least two.
		waitUntil(t, "two releases refused", func() bool { return strings.Count(logs.String(), "too many outstanding") >= 2 })
		if n := redlock.Finishing(c); n != 2 {
			t.Errorf("%d retries pending, want the limit, 2", n)
		}
	})
}

// A rollback is retried only where the acquisition's command may have
// reached the master: a SET that never left (the master refuses
// connections) leaves nothing to roll back there.
func TestFinish_rollbackOfAnUnsentAcquisitionIsNotRetried(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		for _, s := range rs.servers[:2] {
			if _, err := s.Do("SET", "job", "other", "PX", 60000); err != nil {
				t.Fatal(err)
			}
		}
		if err := rs.servers[2].Kill(); err != nil {
			t.Fatal(err)
		}
		c := rs.client(t, path)
		ctx := ctxT(t)
		if _, err := c.TryAcquire(ctx, "job"); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire against another holder: %v", err)
		}
		time.Sleep(2 * realTimeout) // the subject: the rollbacks' bound passes; a retry would be queued by then
		if n := redlock.Finishing(c); n != 0 {
			t.Errorf("%d rollbacks of a SET that never left wait for a retry", n)
		}
	})
}

// countingPool counts the connections asked of a master's pool.
type countingPool struct {
	*pool.RedisPool
	gets atomic.Int64
}

func (p *countingPool) GetContext(ctx context.Context) (redis.Conn, error) {
	p.gets.Add(1)
	return p.RedisPool.GetContext(ctx)
}

// A master that does not answer gets one retry at a time, not one per
// missed release (each would cost a connection and a per-master timeout);
// once it answers, the ones held back go at once. (Pooled path: on the
// pipelined path the retries share the master's connection, and a failed
// dial holds further ones back for a while.)
func TestFinish_holdsBackWhileAMasterIsDown(t *testing.T) {
	t.Parallel()
	rs := startDB1(t, 3)
	counted := &countingPool{RedisPool: rs.pools[2].(*pool.RedisPool)}
	rs.pools[2] = counted
	c := rs.client(t, pooledPath, redlock.WithTimeout(200*time.Millisecond))
	ctx := ctxT(t)
	const n = 20
	acquire := func(i int) *redlock.Lock {
		l, err := c.Acquire(ctx, fmt.Sprintf("k%d", i), redlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	var locks []*redlock.Lock
	for i := 0; i < n; i++ {
		locks = append(locks, acquire(i))
	}
	// Every lock's SET must have reached master 2, or its release needs no
	// retry there. On a busy machine a new connection to master 2 may not
	// be had within the 200 ms timeout: the SET is never sent, and the
	// transport counts master 2 down for a while. Such a lock is taken
	// again until its SET reaches master 2.
	for i := range locks {
		key := fmt.Sprintf("k%d", i)
		for tries := 0; !redistest.Within(time.Second, func() bool { return rs.db1Exists(t, 2, key) }); tries++ {
			if tries == 10 {
				t.Skipf("%s's SET did not reach master 2 in %d acquisitions: the machine is too busy for a 200 ms timeout", key, tries+1)
			}
			t.Logf("%s's SET did not reach master 2: taking it again", key)
			if err := locks[i].Release(ctx); err != nil {
				t.Fatal(err)
			}
			locks[i] = acquire(i)
		}
	}
	resume := pauseMaster(t, rs, 2)
	for _, l := range locks {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release with a quorum: %v", err)
		}
	}
	waitUntil(t, "every release waits for a retry", func() bool { return redlock.Finishing(c) == n })
	before := counted.gets.Load()
	time.Sleep(3 * time.Second) // the subject: the finisher's retries run for a while
	asked := counted.gets.Load() - before
	t.Logf("connections asked of the frozen master in 3 s with %d retries pending: %d", n, asked)
	if asked >= n {
		t.Errorf("%d connections asked of a frozen master in 3 s: retries are not held back", asked)
	}
	resume()
	for i := 0; i < n; i++ {
		rs.freedWithin(t, 2, fmt.Sprintf("k%d", i), 5*time.Second)
	}
	if got := redlock.Finishing(c); got != 0 {
		t.Errorf("%d retries still pending after the master answered", got)
	}
}

// The record of each reentrant owner's newest round (for superseding its
// retries) is dropped once no retry of that round can run: the client's
// bookkeeping stays bounded by the owners active within about a TTL.
func TestFinish_ownersAreSwept(t *testing.T) {
	rs := startReal(t, 1)
	c := rs.client(t, pipelinedPath, redlock.WithTimeout(50*time.Millisecond))
	ctx := ctxT(t)
	cycle := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			r, err := c.NewReentrant("k", fmt.Sprintf("%s%d", prefix, i), redlock.WithTTL(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Acquire(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	cycle("a", 200)
	before := redlock.FinishOwners(c)
	// TTL + 12 timeouts + 1 s + 2 timeouts: no retry of those rounds is left.
	time.Sleep(2 * time.Second) // the subject: the finisher's retries run for a while
	cycle("b", 100)
	after := redlock.FinishOwners(c)
	t.Logf("owners recorded: %d after 200 owners, %d after 100 more past their TTL", before, after)
	if after > 100 {
		t.Errorf("%d owners recorded: the old ones were not swept", after)
	}
}
