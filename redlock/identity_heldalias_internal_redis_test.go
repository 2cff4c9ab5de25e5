package redlock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// infoUntil is a master's transport whose INFO commands go unanswered
// until answer is set, then reach the server.
type infoUntil struct {
	infoSilent
	answer atomic.Bool
}

func (s *infoUntil) Send(cmd *Command) {
	if s.answer.Load() {
		s.infoSilent.Transport.Send(cmd)
		return
	}
	s.infoSilent.Send(cmd)
}

// A lock acquired while one address of a server listed twice was not yet
// identified was counted on distinct servers (the unidentified address's
// grant did not count). When that address is identified later, the
// duplicate is reported to new calls, but the lock already held can still
// be extended (counted once per server) and released, and nothing is left
// behind.
func TestIdentity_lockHeldWhenDuplicateFoundExtendsAndReleases(t *testing.T) {
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			servers := redistest.Start(t, 2)
			port := strings.TrimPrefix(servers[0].Addr(), "127.0.0.1:")
			addrs := []string{servers[0].Addr(), servers[1].Addr(), "localhost:" + port}
			c, err := newRedigoFromAddrs(addrs, withPipelining(p.pipelined), WithTimeout(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			alias := &infoUntil{infoSilent: infoSilent{Transport: c.masters[2].t}}
			c.masters[2].t = alias
			const key = "held-alias"
			// A Reentrant's owner is granted by both addresses of server 0
			// (a plain lock's second SET there would be refused), so the
			// grants counted are master 0's and master 1's.
			re, err := c.NewReentrant(key, "owner", WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if err := re.TryAcquire(context.Background()); err != nil {
				t.Fatalf("not acquired on two distinct servers: %v", err)
			}
			alias.answer.Store(true)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			found := redistest.WaitFor(ctx, func() bool {
				other, err := c.TryAcquire(context.Background(), key+"-other", WithTTL(time.Minute))
				if err == nil {
					// Counted on master 0 and master 1: a distinct pair.
					_ = other.Release(context.Background())
				}
				return errors.Is(err, ErrInvalid)
			})
			if !found {
				t.Fatal("the duplicate was never reported")
			}
			if err := re.Lock().Extend(context.Background(), time.Minute); err != nil {
				t.Errorf("Extend of the lock held on distinct servers: %v", err)
			}
			if err := re.Release(context.Background()); err != nil {
				t.Errorf("Release: %v", err)
			}
			leftover.Within(t, 5*time.Second, servers, key, key+"-other")
		})
	}
}
