package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/redlock"
)

// numSub returns how many subscribers the master has on channel.
func numSub(t *testing.T, rs *realSet, i int, channel string) int {
	t.Helper()
	vals, err := redis.Values(rs.servers[i].Do("PUBSUB", "NUMSUB", channel))
	if err != nil || len(vals) != 2 {
		t.Fatalf("PUBSUB NUMSUB: %v, %v", vals, err)
	}
	n, _ := redis.Int(vals[1], nil)
	return n
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A waiter on a fake clock whose backoff never fires acquires the key as
// soon as the holder releases it: only the release notice can wake it.
func TestRedis_ReleaseWakesWaiterWithoutBackoff(t *testing.T) {
	forN1N5(t, func(t *testing.T, n int) {
		rs := startReal(t, n)
		ctx := context.Background()
		l, err := rs.client(t).Acquire(ctx, "k", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		expectWake(t, rs, []string{"k"}, func(c *redlock.Client) (func(context.Context) error, error) {
			return releaser(c.Acquire(ctx, "k", redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour)))
		}, l.Release)
	})
}

// Many waiters on many keys share one subscriber connection per master,
// and the last waiter of a key unsubscribes it.
func TestRedis_WaitersShareOneSubscriberPerMaster(t *testing.T) {
	rs := startReal(t, 3)
	holder := rs.client(t)
	waiters := rs.client(t, redlock.WithTimeout(realTimeout))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const keys = 20
	for i := 0; i < keys; i++ {
		if _, err := holder.Acquire(ctx, fmt.Sprintf("k%d", i), redlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < keys; i++ {
		for j := 0; j < 3; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = waiters.Acquire(ctx, fmt.Sprintf("k%d", i), redlock.WithWait(time.Hour))
			}()
		}
	}
	waitUntil(t, "every key's channel has its subscriber", func() bool {
		for i := 0; i < keys; i++ {
			if numSub(t, rs, 0, fmt.Sprintf("quorumlock:released:k%d", i)) != 1 {
				return false
			}
		}
		return true
	})
	for i := range rs.servers {
		list, err := redis.String(rs.servers[i].Do("CLIENT", "LIST", "TYPE", "pubsub"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(list, "\n"); got != 1 {
			t.Errorf("master %d has %d pub/sub connections for %d waiters on %d keys, want 1:\n%s", i, got, 3*keys, keys, list)
		}
	}
	cancel()
	wg.Wait()
	waitUntil(t, "the waiters' channels are unsubscribed", func() bool {
		return numSub(t, rs, 0, "quorumlock:released:k0") == 0
	})
}
