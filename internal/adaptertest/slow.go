// Package adaptertest holds what the client libraries' adapters' tests
// (the nested modules goredis, rueidis and valkey) check alike, against
// a real Redis.
package adaptertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/redlock"
)

// SlowSetProxies returns the addresses of proxies in front of the
// redis-servers at addrs, each holding every SET for delay before it
// passes it on: a host whose masters all answer an acquisition late, none
// down. A client of them must speak RESP2 (the proxy relays what redigo
// reads, which HELLO 3 is not). They stop when the test ends.
func SlowSetProxies(t testing.TB, addrs []string, delay time.Duration) []string {
	t.Helper()
	quit := make(chan struct{})
	t.Cleanup(func() { close(quit) })
	out := make([]string, len(addrs))
	for i, a := range addrs {
		px := hostile.NewProxy(t, a, func(_ *hostile.Conn, cmd []string) hostile.Verdict {
			if strings.EqualFold(cmd[0], "SET") {
				hostile.Hold(delay, quit)
			}
			return hostile.Forward
		})
		out[i] = px.Addr()
	}
	return out
}

// SlowMastersAreWaitedFor checks a Client whose masters all answer an
// acquisition later than its per-master timeout (SlowSetProxies): its
// first attempts may fail (it has seen nothing yet), but their late
// answers must reach it, so that within 5 s it waits for the masters, and
// the five attempts after that all succeed. Their TTL, 5 s, lets the
// bound rise to a cap of 500 ms, well past the masters' delay, so that a
// busy host's scheduling does not take their answers beyond it.
func SlowMastersAreWaitedFor(t testing.TB, c *redlock.Client) {
	t.Helper()
	ctx := context.Background()
	try := func(key string) error {
		l, err := c.TryAcquire(ctx, key, redlock.WithTTL(5*time.Second))
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	n := 0
	var err error
	for end := time.Now().Add(5 * time.Second); ; n++ {
		if err = try(fmt.Sprint("slow:learn:", n)); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no acquisition within 5 s (%d attempts) on masters that all answer late: %v", n+1, err)
		}
	}
	for i := range 5 {
		if err := try(fmt.Sprint("slow:", i)); err != nil {
			t.Fatalf("attempt %d on slow masters, once one succeeded: %v", i, err)
		}
	}
}
