package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// A client's first call, with a master SIGSTOPped, returns within one
// per-master timeout and ident.ProbeGrace (100 ms): the run_id probe runs beside
// the call's round, not before it. Another master refuses (the key is
// held there), so the round needs the hung master's answer and waits the
// whole timeout; a probe run first would cost a second timeout.
func TestIdentity_firstCallReturnsWithinOneTimeout_pausedMaster(t *testing.T) {
	servers := redistest.Start(t, 3)
	const key = "bound-k"
	if _, err := servers[1].Do("SET", key, "another-holder", "PX", 600000); err != nil {
		t.Fatal(err)
	}
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[2].Resume()
	addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
	const timeout = 2 * time.Second
	// A loaded machine's lateness; a probe before the round would add a
	// whole timeout.
	const slack = 900 * time.Millisecond
	const bound = timeout + 100*time.Millisecond + slack
	calls := []struct {
		name string
		call func(c *redlock.Client) error
	}{
		{"TryAcquire", func(c *redlock.Client) error {
			_, err := c.TryAcquire(context.Background(), key, redlock.WithTTL(time.Minute))
			return err
		}},
		{"Acquire", func(c *redlock.Client) error {
			_, err := c.Acquire(context.Background(), key, redlock.WithTTL(time.Minute), redlock.WithWait(0))
			return err
		}},
	}
	forEachPath(t, func(t *testing.T, path connPath) {
		for _, tc := range calls {
			c, err := redigo.NewFromAddrs(addrs, path.Option(), redlock.WithTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = tc.call(c)
			took := time.Since(start)
			c.Close()
			if !errors.Is(err, redlock.ErrNotAcquired) {
				t.Errorf("%s: %v, want an error matching ErrNotAcquired", tc.name, err)
			}
			t.Logf("%s: first call took %v (timeout %v)", tc.name, took, timeout)
			if took > bound {
				t.Errorf("%s: the first call took %v, want at most the timeout and 100 ms (%v, with %v of slack)",
					tc.name, took, timeout+100*time.Millisecond, slack)
			}
		}
	})
}
