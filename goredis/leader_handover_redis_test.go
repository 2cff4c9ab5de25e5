package goredis

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/handover"
	"github.com/quorumlock/quorumlock/redlock"
)

// Election.Leader through go-redis: a reader calls Election.Leader again and
// again while candidates hand over many times, on one master and on five,
// with the reader's clients on RESP3 (go-redis's default) and RESP2.
// Every (value, term) it reads is a leader's real pair (each value
// campaigns once) and no term it reads is lower than one it read before:
// Leader reads the holder's token, its recorded term and its value in one
// script step per master, which the go-redis Inspector runs as it is.
func TestLeader_readsRealPairsDuringHandOver(t *testing.T) {
	for _, n := range []int{1, 5} {
		for _, proto := range []int{3, 2} {
			t.Run(fmt.Sprintf("N=%d/RESP%d", n, proto), func(t *testing.T) {
				ms := startMasters(t, n)
				ctx := ctxFor(t)
				readers := make([]redis.UniversalClient, n)
				for i, s := range ms.servers {
					c := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: proto})
					t.Cleanup(func() { c.Close() })
					readers[i] = c
				}
				rc, err := New(readers, redlock.WithTimeout(lockTimeout))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { rc.Close() })
				reader, err := election.New(rc, "ho")
				if err != nil {
					t.Fatal(err)
				}
				candidates := make([]*election.Election, 3)
				for i := range candidates {
					if candidates[i], err = election.New(ms.lockClient(t), "ho", election.WithTTL(2*time.Second)); err != nil {
						t.Fatal(err)
					}
				}
				handover.LeaderDuring(ctx, t, reader, candidates, 12)
			})
		}
	}
}
