package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// Every master stopped (SIGSTOP), N=1 and N=3, known down (an
// acquisition's commands unanswered for over the timeout), and no command
// left in flight: then a Release. docs/design.md ("down is beyond the
// host") says that with every master hung each command sent "holds its
// pooled connection one per-master timeout past its deadline, as
// before", and no command of the release has a deadline past its wait.
// Close, called as the Release returns, therefore ends within one timeout
// of the release's wait, counted from when the Release began: at once
// when the release waited for every master; later when it returned as
// soon as its quorum was out of reach, a master whose silence is the
// least (the host's) keeping its longer wait. (The first command after a
// master stops, sent while it was not silent yet, reads up to lateBound
// past its deadline by design: the test waits for those to end before
// the Release.)
func TestPooled_releaseToEveryMasterStoppedHoldsItsConnectionOneTimeout(t *testing.T) {
	redistest.SkipShort(t)
	releaseToEveryMasterStopped(t, true)
}

// As above, but the Release is sent as soon as every master is known down
// (an acquisition's commands unanswered for over the timeout), so they
// have been silent for less than the release's wait (a second) beyond
// each other: the release is not hung, and the pooled transport reads
// its reply up to lateBound past its deadline (docs/design.md, "down is
// beyond the host"). Its connections are back within its wait and
// lateBound: Close, called as the Release returns, ends by then.
func TestPooled_releaseSentAsEveryMasterStopsHoldsItsConnectionToLateBound(t *testing.T) {
	redistest.SkipShort(t)
	releaseToEveryMasterStopped(t, false)
}

// releaseToEveryMasterStopped releases a lock after stopping every
// master, once no command is in flight (settled) or at once, and checks
// how long the release's commands hold their pooled connections.
func releaseToEveryMasterStopped(t *testing.T, settled bool) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			servers := redistest.Start(t, n)
			const timeout = 100 * time.Millisecond
			const slack = 300 * time.Millisecond // a loaded, shared machine
			pools := make([]*redis.Pool, n)
			for i, s := range servers {
				pools[i] = redistest.UserRedisPool(s.Addr(), nil)
				t.Cleanup(func() { pools[i].Close() })
			}
			inUse := func() int {
				u := 0
				for _, p := range pools {
					st := p.Stats()
					u += st.ActiveCount - st.IdleCount
				}
				return u
			}
			ps := make([]pool.Pool, n)
			for i, p := range pools {
				ps[i] = p
			}
			c := pooledOf(t, ps, redlock.WithTimeout(timeout))
			warm(t, c, "silenthost:close:warm")
			ctx := context.Background()
			held, err := c.TryAcquire(ctx, "silenthost:close:held", redlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			pauseAll(t, servers)
			silentFrom := time.Now()
			if _, err := c.TryAcquire(ctx, "silenthost:close:try"); err == nil {
				t.Fatal("acquired with every master stopped")
			}
			const releaseWait = time.Second // lateBound(timeout)
			if settled {
				// The first commands after the stop read up to lateBound.
				// The masters are hung for the release once silent for
				// longer than its wait, a silence net of the time this
				// process did not run: on a loaded machine that takes
				// longer than the wait on the clock, hence the margin.
				redistest.Eventually(t, 10*time.Second, "the acquisition's connections back and the masters silent for well over the release's wait", func() bool {
					return inUse() == 0 && time.Since(silentFrom) > releaseWait+1500*time.Millisecond
				})
			}
			begin := time.Now()
			err = held.Release(ctx)
			released := time.Since(begin)
			t.Logf("Release: %v after %v", err, released.Round(time.Millisecond))
			if err == nil {
				t.Fatal("Release confirmed with every master stopped")
			}
			if !settled {
				// Close waits for the commands in flight: the release's,
				// and any background retry of the commands the masters
				// missed (finish.go), which Close ends, each holding its
				// connection one timeout.
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
				held := time.Since(begin)
				t.Logf("Close as the Release returned: %v after the Release began", held.Round(time.Millisecond))
				if u := inUse(); u != 0 {
					t.Errorf("%d connections still in use after Close", u)
				}
				if lateBound := time.Second; held > releaseWait+lateBound+slack {
					t.Errorf("a Release sent as every master stopped held its pooled connections %v, past its wait (%v) and lateBound (%v)", held.Round(time.Millisecond), releaseWait, lateBound)
				}
				return
			}
			if released > releaseWait+slack {
				t.Errorf("a Release to every master stopped returned after %v, past its wait (%v)", released, releaseWait)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			closed := time.Since(begin)
			t.Logf("Close as the Release returned: %v after the Release began", closed.Round(time.Millisecond))
			if closed > releaseWait+timeout+slack {
				t.Errorf("Close ended %v after a Release to every master stopped began (it returned at %v): its commands held their connections %v past the release's wait (%v), want at most one timeout (%v)", closed.Round(time.Millisecond), released.Round(time.Millisecond), (closed - releaseWait).Round(time.Millisecond), releaseWait, timeout)
			}
		})
	}
}
