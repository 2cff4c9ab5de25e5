package redlock_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// A master slow to run an acquisition — it answers later than the
// per-master timeout, and later than the Client's own wait for its
// commands when Close begins — grants a key while Close is under way. The
// grant, read while Close waits for the command, is rolled back: the
// rollback (an Undo) is sent after the transport's Close began, to a
// master that answers, and Close waits for it and still ends within the
// command's bound. Afterwards nothing of the attempt is on the master.
// The pooled path: the pipelined one fails what its connection carries
// at Close and queues the rollback behind the SET on that connection,
// which this proxy, handling one command at a time, drops once the
// client has closed it.
func TestClose_grantReadDuringCloseIsRolledBack(t *testing.T) {
	{
		path := pooledPath
		real := redistest.Start(t, 1)[0]
		seen := make(chan struct{})
		release := make(chan struct{})
		var once sync.Once
		key := "lateundo"
		proxy := hostile.NewProxy(t, real.Addr(), func(c *hostile.Conn, cmd []string) hostile.Verdict {
			if cmd[0] != "SET" || len(cmd) < 2 || cmd[1] != key {
				return hostile.Forward
			}
			once.Do(func() { close(seen) })
			select {
			case <-release:
			case <-c.Quit():
			}
			return hostile.Forward
		})
		c := addrClient(t, path, []string{proxy.Addr()})
		ctx := ctxT(t)
		// First contact (the run_id probe) is made before: the SET held
		// below is a later call's, whose master has been silent for it.
		warm, err := c.TryAcquire(ctx, "lateundo-warm")
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := c.TryAcquire(ctx, key, redlock.WithTTL(30*time.Second))
			done <- err
		}()
		select {
		case <-seen:
		case <-ctx.Done():
			t.Fatal("the SET never reached the master")
		}
		closeStart := time.Now()
		closed := make(chan time.Duration, 1)
		go func() {
			c.Close()
			closed <- time.Since(closeStart)
		}()
		<-c.Done()
		// The master runs the SET once the Client has given up waiting
		// for its commands (one per-master timeout) and closed its
		// transports, within the command's late bound.
		time.AfterFunc(realTimeout+realTimeout/2, func() { close(release) })
		var took time.Duration
		select {
		case took = <-closed:
		case <-ctx.Done():
			t.Fatal("Close did not return")
		}
		err = <-done
		t.Logf("TryAcquire: %v; Close took %v", err, took)
		if err == nil {
			t.Errorf("the attempt succeeded across Close")
		}
		if bound := realTimeout + realTimeout + time.Second + 200*time.Millisecond; took > bound {
			t.Errorf("Close took %v, want at most %v", took, bound)
		}
		// The SET has run on the master (after Close, on the pipelined
		// path, whose Close does not wait for it).
		if !redistest.WaitFor(ctx, func() bool { return real.Calls("set") >= 1 }) {
			t.Fatal("the SET never ran")
		}
		left := ""
		ok := redistest.WaitFor(ctx, func() bool {
			v, err := redis.String(real.Do("GET", key))
			if errors.Is(err, redis.ErrNil) {
				return true
			}
			left = v
			return false
		})
		if !ok {
			pttl, _ := redis.Int(real.Do("PTTL", key))
			t.Errorf("the master still holds %q (PTTL %d ms) after Close", left, pttl)
		}
		t.Logf("commands seen by the master: %v", proxy.Seen())
	}
}
