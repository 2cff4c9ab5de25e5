package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// A server busy running a long script answers every command, INFO
// included, with a BUSY error until the script ends. That is an answer
// that carries no run_id, but not one that stays: once the script is
// killed the server answers INFO again. One server under two addresses,
// busy at the client's first contact, must still not count twice toward
// a quorum once it is no longer busy: here a third master refuses, so
// the two addresses' grants (one server's) must not make a quorum of two.
func TestIdentity_aliasBusyAtFirstContactNeverCountsTwice(t *testing.T) {
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			servers := redistest.Start(t, 2, redistest.WithConfig("busy-reply-threshold", "20"))
			const key = "alias-busy"
			// Master 1 refuses: another client holds the key there.
			addrs := aliasAddrsWithRefusal(t, servers, key)

			// Server 0 runs a script that does not end until killed.
			busy := make(chan error, 1)
			go func() {
				_, err := servers[0].Do("EVAL", "while true do end", "0")
				busy <- err
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if !redistest.WaitFor(ctx, func() bool {
				_, err := servers[0].Do("PING")
				return err != nil && strings.HasPrefix(err.Error(), "BUSY")
			}) {
				t.Fatal("server 0 never answered BUSY")
			}

			c, err := newRedigoFromAddrs(addrs, withPipelining(p.pipelined), WithTimeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// A Reentrant's owner is granted again by a server that holds
			// its hold, so both addresses of server 0 grant.
			re, err := c.NewReentrant(key, "owner", WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			// The first call meets the busy server on both its addresses.
			if err := re.TryAcquire(context.Background()); err == nil {
				_ = re.Release(context.Background())
				t.Fatal("acquired while server 0 was busy and master 1 refused")
			}

			if _, err := servers[0].Do("SCRIPT", "KILL"); err != nil {
				t.Fatalf("SCRIPT KILL: %v", err)
			}
			if err := <-busy; err == nil {
				t.Fatal("the busy script ended without an error")
			}
			if !redistest.WaitFor(ctx, func() bool {
				_, err := servers[0].Do("PING")
				return err == nil
			}) {
				t.Fatal("server 0 never answered again")
			}

			// Calls after the busy spell: none may count server 0 twice;
			// once the server answers INFO, the duplicate is found.
			calls := 0
			var last error
			found := redistest.WaitFor(ctx, func() bool {
				calls++
				err := re.TryAcquire(context.Background())
				if err == nil {
					_ = re.Release(context.Background())
					t.Fatalf("call %d after the busy spell: acquired on the grants of one server under two addresses and a refusal", calls)
				}
				if !errors.Is(err, ErrNotAcquired) && !errors.Is(err, ErrInvalid) {
					t.Fatalf("call %d after the busy spell: %v, want an error matching ErrNotAcquired or ErrInvalid", calls, err)
				}
				last = err
				return errors.Is(err, ErrInvalid)
			})
			if !found {
				t.Errorf("server 0 listed twice not reported after %d calls (ids %q, final %v); the last: %v", calls, c.ident.IDs(), c.ident.Final(), last)
			}
			leftover.Within(t, 5*time.Second, servers[:1], key)
		})
	}
}
