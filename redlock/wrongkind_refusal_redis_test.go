package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/redlock"
)

// A master whose copy of the key is a lock of another kind answers the
// acquisition's script WRONGTYPE: that is a refusal (the key is held
// there), named by its kind, and nothing more is sent to that master for
// the attempt — no rollback, no retry of one. On N=1, 3 and 5 masters,
// both paths: some masters hold a plain lock's string, one more (N > 1)
// another holder of the same kind, and the rest grant, so that the
// attempt fails and rolls back where it was granted.

// wrongKindAttempts are the acquisitions whose script meets a string.
var wrongKindAttempts = []struct {
	name, kind string
	try        func(ctx context.Context, c *redlock.Client, key string) error
	other      func(ctx context.Context, c *redlock.Client, key string) error // another holder of the same kind
}{
	{"reentrant", "reentrant", func(ctx context.Context, c *redlock.Client, key string) error {
		r, err := c.NewReentrant(key, "owner-a")
		if err != nil {
			return err
		}
		return r.TryAcquire(ctx)
	}, func(ctx context.Context, c *redlock.Client, key string) error {
		r, err := c.NewReentrant(key, "owner-b")
		if err != nil {
			return err
		}
		return r.TryAcquire(ctx)
	}},
	{"read", "read-write", func(ctx context.Context, c *redlock.Client, key string) error {
		_, err := c.TryAcquireRead(ctx, key)
		return err
	}, func(ctx context.Context, c *redlock.Client, key string) error {
		_, err := c.TryAcquireWrite(ctx, key)
		return err
	}},
}

func TestWrongKind_isARefusalWithNoRollback(t *testing.T) {
	for _, tc := range wrongKindAttempts {
		t.Run(tc.name, func(t *testing.T) {
			forEachPath(t, func(t *testing.T, path connPath) {
				forEachN(t, func(t *testing.T, n int) {
					rs := startReal(t, n)
					ctx := ctxT(t)
					key := "wrongkind:" + tc.name
					// So many refusals that the last one decides: every
					// one is awaited (a master not awaited is rolled back
					// at once on a pipelined connection, its answer
					// unknown). Masters 0..wrong-1 hold a plain lock's
					// string, master wrong (when N > 1) another holder.
					wrong := n - (n/2 + 1) + 1
					if n > 1 {
						wrong--
					}
					for i := 0; i < wrong; i++ {
						if _, err := rs.servers[i].Do("SET", key, "plain-token", "PX", 60000); err != nil {
							t.Fatal(err)
						}
					}
					if n > 1 {
						// Another holder of the same kind on one more master,
						// through a client of that master alone.
						other := (&realSet{servers: rs.servers[wrong : wrong+1], pools: rs.pools[wrong : wrong+1]}).client(t, path)
						if err := tc.other(ctx, other, key); err != nil {
							t.Fatal(err)
						}
					}
					// The scripts loaded: a pooled EVALSHA of a script the
					// master lacks would count twice (NOSCRIPT, then EVAL).
					for _, s := range rs.servers {
						for _, sc := range scripts.All {
							if _, err := s.Do("SCRIPT", "LOAD", sc.Source()); err != nil {
								t.Fatal(err)
							}
						}
					}
					before := make([]int, wrong)
					for i := range before {
						before[i] = rs.servers[i].Calls("evalsha") + rs.servers[i].Calls("eval")
					}

					c := rs.client(t, path)
					err := tc.try(ctx, c, key)
					if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, redlock.ErrWrongKind) {
						t.Fatalf("err = %v, want ErrNotAcquired and ErrWrongKind", err)
					}
					if !strings.Contains(err.Error(), "not by a "+tc.kind+" lock") {
						t.Errorf("the error does not name the kind: %v", err)
					}
					var qe *redlock.QuorumError
					if !errors.As(err, &qe) {
						t.Fatalf("%T is not a *QuorumError", err)
					}
					for i := 0; i < wrong; i++ {
						if !slices.Contains(qe.Refused, i) {
							t.Errorf("master %d (another kind) is not among the refusals %v: %v", i, qe.Refused, err)
						}
					}
					if qe.Failed != nil {
						t.Errorf("failures: %v", qe.Failed)
					}
					if qe.WrongKind == nil || len(qe.WrongKind.Errors) != wrong {
						t.Errorf("WrongKind = %v, want the %d masters of another kind", qe.WrongKind, wrong)
					}

					// The masters that granted it are rolled back...
					if wrong+1 < n {
						leftover.None(t, rs.servers[wrong+1:n], key)
					}
					// ...and those of another kind were sent nothing more
					// than the attempt's one script: no rollback. (Close
					// waits for the commands in flight.)
					c.Close()
					for i := 0; i < wrong; i++ {
						got := rs.servers[i].Calls("evalsha") + rs.servers[i].Calls("eval") - before[i]
						if got != 1 {
							t.Errorf("master %d (another kind) ran %d scripts for the attempt, want 1 (no rollback)", i, got)
						}
						if v, err := redis.String(rs.servers[i].Do("GET", key)); err != nil || v != "plain-token" {
							t.Errorf("master %d: the plain lock's string is %q, %v", i, v, err)
						}
					}
				})
			})
		})
	}
}

// With a master stopped (SIGSTOP) beside the one of another kind, the
// attempt fails: the master of another kind is sent nothing more, the
// stopped one's acquisition runs once it runs again and is rolled back
// there, and the owner's next attempt, once the other kind's key is gone,
// takes the lock on every master. N=3, both paths: master 0 holds a plain
// lock's string, master 1 grants, master 2 is stopped.
func TestWrongKind_besideAStoppedMaster(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		key := "wrongkind:stopped"
		c := rs.client(t, path, redlock.WithTimeout(100*time.Millisecond))
		if _, err := c.Inspect(ctx, "warm-up"); err != nil { // the masters identified
			t.Fatal(err)
		}
		for _, s := range rs.servers {
			for _, sc := range scripts.All {
				if _, err := s.Do("SCRIPT", "LOAD", sc.Source()); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := rs.servers[0].Do("SET", key, "plain-token", "PX", 60000); err != nil {
			t.Fatal(err)
		}
		before := rs.servers[0].Calls("evalsha") + rs.servers[0].Calls("eval")
		if err := rs.servers[2].Pause(); err != nil {
			t.Fatal(err)
		}
		resumed := false
		defer func() {
			if !resumed {
				_ = rs.servers[2].Resume()
			}
		}()
		r, err := c.NewReentrant(key, "owner-a")
		if err != nil {
			t.Fatal(err)
		}
		err = r.TryAcquire(ctx)
		var qe *redlock.QuorumError
		if !errors.Is(err, redlock.ErrWrongKind) || !errors.As(err, &qe) || !slices.Contains(qe.Refused, 0) {
			t.Fatalf("err = %v, want master 0 refused with ErrWrongKind", err)
		}
		// The grant on master 1 is rolled back while master 2 is stopped.
		if !rs.servers[1].WaitAbsent(key, 5*time.Second) {
			t.Fatal("the grant on master 1 was not rolled back")
		}
		if _, err := rs.servers[0].Do("DEL", key); err != nil {
			t.Fatal(err)
		}
		resumed = true
		if err := rs.servers[2].Resume(); err != nil {
			t.Fatal(err)
		}
		// The stopped master's acquisition ran late, and was rolled back.
		if !rs.servers[2].WaitAbsent(key, 5*time.Second) {
			t.Fatal("the late acquisition on the stopped master stays")
		}
		if got := rs.servers[0].Calls("evalsha") + rs.servers[0].Calls("eval") - before; got != 1 {
			t.Errorf("master 0 (another kind) ran %d scripts for the attempt, want 1 (no rollback)", got)
		}
		// The owner's next attempt takes the lock everywhere.
		if err := r.TryAcquire(ctx); err != nil {
			t.Fatalf("the owner's next attempt: %v", err)
		}
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A read or write lock meets a key a reentrant lock holds (both are
// hashes): every master refuses it as another kind's, writing nothing, so
// the reentrant hold stays whole on every master and its owner still
// releases it.
func TestWrongKind_readWriteLeavesAReentrantHoldWhole(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		ctx := ctxT(t)
		const key = "wrongkind:rw-on-reentrant"
		c := rs.client(t, path)
		r, err := c.NewReentrant(key, "owner")
		if err != nil {
			t.Fatal(err)
		}
		if err := r.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.TryAcquire(ctx); err != nil { // count 2
			t.Fatal(err)
		}
		// Wait for the hold on every master, not only the quorum.
		for i, s := range rs.servers {
			eventually(t, fmt.Sprintf("master %d: the reentrant hold's count at 2", i), func() bool {
				v, err := redis.String(s.Do("HGET", key, "owner"))
				return err == nil && v == "2"
			})
		}
		for _, try := range []func() error{
			func() error { _, err := c.TryAcquireRead(ctx, key); return err },
			func() error { _, err := c.TryAcquireWrite(ctx, key); return err },
		} {
			err := try()
			if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, redlock.ErrWrongKind) {
				t.Fatalf("err = %v, want ErrNotAcquired and ErrWrongKind", err)
			}
			if !strings.Contains(err.Error(), "held by a reentrant lock") {
				t.Errorf("the error does not name the reentrant lock: %v", err)
			}
		}
		for i, s := range rs.servers {
			if v, err := redis.String(s.Do("HGET", key, "owner")); err != nil || v != "2" {
				t.Errorf("master %d: the reentrant hold's count is %q, %v after the read-write attempts; want 2", i, v, err)
			}
		}
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
		leftover.None(t, rs.servers, key)
	})
}
