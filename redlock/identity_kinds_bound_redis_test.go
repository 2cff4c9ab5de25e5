package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// Every kind's first call, with a master SIGSTOPped, returns within one
// per-master timeout and ident.ProbeGrace (100 ms): whatever talks to the
// masters first starts the run_id probe beside its own round, and the
// round waits for that probe at most as long as for the hung master. A
// second master holds each key as a plain string, so no kind but the
// semaphore (whose slots are keys of their own) reaches a quorum without
// the hung master; nothing is left behind.
func TestIdentity_firstCallOfEveryKindReturnsWithinOneTimeout_pausedMaster(t *testing.T) {
	servers := redistest.Start(t, 3)
	const timeout = time.Second
	const slack = 900 * time.Millisecond // a loaded machine's lateness
	const bound = timeout + 100*time.Millisecond + slack
	const closeSlack = 500 * time.Millisecond
	calls := []struct {
		name string
		call func(ctx context.Context, c *redlock.Client, key string) error
		// free: the kind keeps its own keys (a semaphore's slots), so the
		// string on master 1 does not refuse it: masters 0 and 1 make its
		// quorum once the probe (of master 2: timed out) ended.
		free bool
	}{
		{"fenced", func(ctx context.Context, c *redlock.Client, key string) error {
			_, err := c.TryAcquire(ctx, key, redlock.WithTTL(time.Minute), redlock.WithFencing())
			return err
		}, false},
		{"reentrant", func(ctx context.Context, c *redlock.Client, key string) error {
			re, err := c.NewReentrant(key, "owner", redlock.WithTTL(time.Minute))
			if err != nil {
				return err
			}
			return re.TryAcquire(ctx)
		}, false},
		{"read", func(ctx context.Context, c *redlock.Client, key string) error {
			_, err := c.TryAcquireRead(ctx, key, redlock.WithTTL(time.Minute))
			return err
		}, false},
		{"multi", func(ctx context.Context, c *redlock.Client, key string) error {
			_, err := c.TryAcquireMulti(ctx, []string{key}, redlock.WithTTL(time.Minute))
			return err
		}, false},
		{"semaphore", func(ctx context.Context, c *redlock.Client, key string) error {
			s, err := c.NewSemaphore(key, 2, redlock.WithTTL(time.Minute))
			if err != nil {
				return err
			}
			p, err := s.TryAcquire(ctx)
			if err != nil {
				return err
			}
			return p.Release(ctx)
		}, true},
		{"Do", func(ctx context.Context, c *redlock.Client, key string) error {
			return c.Do(ctx, key, func(context.Context) error { return nil }, redlock.WithTTL(time.Minute), redlock.WithWait(0))
		}, false},
		{"Leader", func(ctx context.Context, c *redlock.Client, key string) error {
			e, err := election.New(c, key)
			if err != nil {
				return err
			}
			_, err = e.Leader(ctx)
			return err
		}, false},
	}
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[2].Resume()
	addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
	forEachPath(t, func(t *testing.T, path connPath) {
		var keys []string
		for _, tc := range calls {
			key := "kinds-bound-" + path.name + "-" + tc.name
			keys = append(keys, key)
			if _, err := servers[1].Do("SET", key, "another-holder", "PX", 600000); err != nil {
				t.Fatal(err)
			}
			c, err := redigo.NewFromAddrs(addrs, path.Option(), redlock.WithTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = tc.call(context.Background(), c, key)
			took := time.Since(start)
			closing := time.Now()
			c.Close()
			closed := time.Since(closing)
			t.Logf("%s: Close took %v", tc.name, closed)
			// On the pipelined path Close gives what is in flight (the
			// rollback sent to the hung master) one per-master timeout
			// (docs/design.md, "Closing a client"), the dial to the hung
			// master included.
			if path == pipelinedPath && closed > timeout+closeSlack {
				t.Errorf("%s: Close took %v, want at most the timeout (%v, with %v of slack)", tc.name, closed, timeout, closeSlack)
			}
			if err == nil && !tc.free {
				t.Errorf("%s: succeeded without a quorum (master 1 holds the key, master 2 is paused)", tc.name)
			}
			t.Logf("%s: first call took %v (timeout %v): %v", tc.name, took, timeout, err)
			if took > bound {
				t.Errorf("%s: the first call took %v, want at most the timeout and 100 ms (%v, with %v of slack)",
					tc.name, took, timeout+100*time.Millisecond, slack)
			}
			if _, err := servers[1].Do("DEL", key); err != nil {
				t.Fatal(err)
			}
		}
		leftover.Within(t, 5*time.Second, servers[:2], keys...)
	})
}
