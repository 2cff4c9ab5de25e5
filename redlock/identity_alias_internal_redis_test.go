package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// infoSilent is a master's transport whose INFO commands are never
// answered (they fail at their deadline), as from a server that hangs on
// INFO alone: the run_id probe of that master times out while its lock
// commands are answered.
type infoSilent struct {
	Transport
	wg sync.WaitGroup
}

func (s *infoSilent) Send(cmd *Command) {
	if cmd.Name != "INFO" {
		s.Transport.Send(cmd)
		return
	}
	s.wg.Add(1)
	time.AfterFunc(time.Until(cmd.Deadline), func() {
		defer s.wg.Done()
		cmd.Complete(nil, fmt.Errorf("INFO not answered: %w", context.DeadlineExceeded), SendInfo{})
	})
}

func (s *infoSilent) Close() error {
	err := s.Transport.Close()
	s.wg.Wait()
	return err
}

// One server under two addresses, the second's run_id probe timing out,
// and a third master refusing: the grants of the two addresses are one
// server's, so they must not make a quorum of two. A Reentrant's owner is
// granted again by a server that holds its hold, so both addresses grant;
// the grant of the unidentified address counts for nothing, the attempt
// fails, and what was granted is rolled back.
func TestIdentity_aliasWhoseProbeTimesOutNeverCountsTwice(t *testing.T) {
	servers := redistest.Start(t, 2)
	const key = "alias-re"
	addrs := aliasAddrsWithRefusal(t, servers, key)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			c, err := newRedigoFromAddrs(addrs, withPipelining(p.pipelined), WithTimeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.masters[2].t = &infoSilent{Transport: c.masters[2].t} // before any call
			re, err := c.NewReentrant(key, "owner", WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			err = re.TryAcquire(context.Background())
			if err == nil {
				_ = re.Release(context.Background())
				t.Fatal("acquired on the grants of one server under two addresses and a refusal")
			}
			if !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("%v, want an error matching ErrNotAcquired", err)
			}
			if !strings.Contains(err.Error(), "granted but not counted") || !strings.Contains(err.Error(), "master 2 ("+addrs[2]+")") {
				t.Errorf("%q does not name master 2's grant as not counted", err)
			}
			leftover.None(t, servers[:1], key)
		})
	}
}

// infoSilentFirst is a master's transport whose first INFO is never
// answered (it fails at its deadline); later ones are.
type infoSilentFirst struct {
	infoSilent
	once sync.Once
}

func (s *infoSilentFirst) Send(cmd *Command) {
	first := false
	if cmd.Name == "INFO" {
		s.once.Do(func() { first = true })
	}
	if first {
		s.infoSilent.Send(cmd)
		return
	}
	s.Transport.Send(cmd)
}

// A master whose first run_id probe timed out but that then granted is
// asked again at once, in the background, without waiting for a later
// call: its grants count once it answered. Master 1 refuses (the key is
// held there), so the first attempt fails on master 2's uncounted grant;
// no call is made until master 2 is identified.
func TestIdentity_masterThatGrantedIsAskedAgain(t *testing.T) {
	servers := redistest.Start(t, 3)
	const key = "reprobe-k"
	if _, err := servers[1].Do("SET", key, "another-holder", "PX", 600000); err != nil {
		t.Fatal(err)
	}
	addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			c, err := newRedigoFromAddrs(addrs, withPipelining(p.pipelined), WithTimeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.masters[2].t = &infoSilentFirst{infoSilent: infoSilent{Transport: c.masters[2].t}} // before any call
			_, err = c.TryAcquire(context.Background(), key, WithTTL(time.Minute))
			if !errors.Is(err, ErrNotAcquired) || !strings.Contains(err.Error(), "granted but not counted") {
				t.Fatalf("%v, want ErrNotAcquired with master 2's grant not counted", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if !redistest.WaitFor(ctx, func() bool {
				return c.ident.IDs()[2] != ""
			}) {
				t.Fatal("master 2 was not asked again after it granted")
			}
			l, err := c.TryAcquire(context.Background(), key, WithTTL(time.Minute))
			if err != nil {
				t.Fatalf("with master 2 identified: %v", err)
			}
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// aliasAddrsWithRefusal returns the addresses of servers[0], servers[1]
// and servers[0] again as localhost:PORT (one server under two addresses),
// with key held on servers[1] by another owner's Reentrant, released at
// the test's end: the two addresses' grants are all an attempt can get.
func aliasAddrsWithRefusal(t *testing.T, servers []*redistest.Server, key string) []string {
	t.Helper()
	port := strings.TrimPrefix(servers[0].Addr(), "127.0.0.1:")
	other, err := newRedigoFromAddrs([]string{servers[1].Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	oh, err := other.NewReentrant(key, "another-owner", WithTTL(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := oh.TryAcquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = oh.Release(context.Background()) })
	return []string{servers[0].Addr(), servers[1].Addr(), "localhost:" + port}
}
