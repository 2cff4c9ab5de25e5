package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/pool"
)

// lyingTTLClient is a Client on three masters behind proxies; the first
// liars of them answer every waiting plain attempt with lie in place of
// the master's own reply (the attempt still runs there). attempts counts
// the waiting plain attempts the masters saw.
func lyingTTLClient(t *testing.T, servers []*redistest.Server, liars int, lie string, attempts *atomic.Int64) *Client {
	t.Helper()
	pools := make([]pool.Pool, len(servers))
	for i, s := range servers {
		px := hostile.NewProxy(t, s.Addr(), func(c *hostile.Conn, cmd []string) hostile.Verdict {
			wait := len(cmd) > 1 && (strings.EqualFold(cmd[0], "EVALSHA") && cmd[1] == scripts.WaitAcquire.SHA() ||
				strings.EqualFold(cmd[0], "EVAL") && cmd[1] == scripts.WaitAcquire.Source())
			if !wait {
				return hostile.Forward
			}
			attempts.Add(1)
			if i >= liars {
				return hostile.Forward
			}
			if c.Write(lie) != nil {
				return hostile.HangUp
			}
			return hostile.Swallow
		})
		p, err := pool.New(px.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		pools[i] = p
	}
	return identified(t)(newRedigo(pools, withPipelining(true)))
}

// A waiter's refused attempts hear the holder's remaining TTL from each
// master; masters that lie about it (0 while they hold the key, a
// negative or huge TTL, a string where an integer belongs) neither make
// the waiter spin nor take the lock: over a second of waiting on a key
// held for longer, it makes no more attempts than the hint's floor allows
// (2 ms doubling up to the 250 ms backoff ceiling: about a dozen, each
// seen by up to three masters), and with one liar of three (the
// quorum-th soonest is an honest master's) about as many as with none.
func TestExpiry_lyingRemainingTTLsNeitherSpinNorGrant(t *testing.T) {
	servers := redistest.Start(t, 3)
	const wait = time.Second
	var honest int64
	for _, tc := range []struct {
		name   string
		liars  int
		lie    string
		atMost func() int64
	}{
		{"none", 0, "", func() int64 { return 16 * 3 }},
		{"one zero of three", 1, ":0\r\n", func() int64 { return honest + 6 }},
		{"all zero", 3, ":0\r\n", func() int64 { return 16 * 3 }},
		{"all negative", 3, ":-5\r\n", func() int64 { return 16 * 3 }},
		{"all huge", 3, ":9223372036854775807\r\n", func() int64 { return 16 * 3 }},
		{"all a string", 3, "$1\r\n0\r\n", func() int64 { return 16 * 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var attempts atomic.Int64
			c := lyingTTLClient(t, servers, tc.liars, tc.lie, &attempts)
			key := "expiry-lies:" + strings.ReplaceAll(tc.name, " ", "-")
			for _, s := range servers {
				if _, err := s.Do("SET", key, "holder", "PX", 30000); err != nil {
					t.Fatal(err)
				}
			}
			defer func() {
				for _, s := range servers {
					s.Do("DEL", key)
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			l, err := c.Acquire(ctx, key, WithTTL(10*time.Second))
			if err == nil {
				l.Release(context.Background())
				t.Fatalf("took a key held for 30 s on every master")
			}
			if !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("Acquire: %v, want ErrNotAcquired", err)
			}
			n := attempts.Load()
			if tc.liars == 0 {
				honest = n
			}
			t.Logf("%d waiting attempts seen by the masters in %v", n, wait)
			if limit := tc.atMost(); n > limit {
				t.Errorf("%d waiting attempts in %v, want at most %d", n, wait, limit)
			}
			for i, s := range servers {
				if v, err := s.Do("GET", key); err != nil || fmt.Sprint(v) != "[104 111 108 100 101 114]" {
					t.Errorf("master %d: key holds %v, %v; want the holder's token", i, v, err)
				}
			}
		})
	}
}
