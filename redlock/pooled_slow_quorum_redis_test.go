package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// Two masters of three answer every command, INFO too, three per-master
// timeouts late from the Client's first contact (a relay): a host whose
// masters are slow, not down. Their late answers are read (pooled: their
// master is silent for less than the command's wait) and the adaptive
// bound rises to them (half a second here), so acquisitions should
// succeed once it has: the bound is there so that a host whose masters
// all answer late is not a host whose locks always fail. The identity
// probe, though, waits the per-master timeout and ident.ProbeGrace only, so it
// never hears these masters, and their grants never count ("granted but
// not counted (its server not identified yet ...)").
func TestPooled_quorumOfSlowMastersIsAcquiredOnceTheBoundLearnsThem(t *testing.T) {
	redistest.SkipShort(t)
	servers := redistest.Start(t, 3)
	const timeout = 100 * time.Millisecond
	const delay = 3 * timeout
	addrs := []string{
		servers[0].Addr(),
		hostile.Delay(t, servers[1].Addr(), delay),
		hostile.Delay(t, servers[2].Addr(), delay),
	}
	c := pooledAddrClient(t, addrs, redlock.WithTimeout(timeout))
	ctx := context.Background()
	const ttl = 5 * time.Second // the adaptive bound may rise to half a second
	tries := 0
	var last error
	ok := redistest.Within(10*time.Second, func() bool {
		tries++
		l, err := c.TryAcquire(ctx, fmt.Sprintf("silenthost:slowquorum:%d", tries), redlock.WithTTL(ttl))
		if err != nil {
			last = err
			return false
		}
		_ = l.Release(ctx)
		return true
	})
	if !ok {
		t.Errorf("no acquisition in 10 s (%d tries) through two masters of three answering %v late, timeout %v; the last: %v", tries, delay, timeout, last)
	}
}
