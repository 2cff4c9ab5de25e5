package goredis

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
)

// Two go-redis clients of one server ("localhost:P" and "127.0.0.1:P")
// would count it twice toward a quorum: the client's run_id check at first
// contact, INFO sent through the adapter as any command, refuses them, as
// it does on the redigo paths, over RESP3 and RESP2.
func TestIdentity_sameServerTwiceIsRefused(t *testing.T) {
	for _, proto := range []int{3, 2} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ms := startMasters(t, 2)
			port := strings.TrimPrefix(ms.servers[0].addr, "127.0.0.1:")
			addrs := []string{ms.servers[0].addr, ms.servers[1].addr, "localhost:" + port}
			var clients []redis.UniversalClient
			for _, a := range addrs {
				c := redis.NewClient(&redis.Options{Addr: a, Protocol: proto})
				t.Cleanup(func() { c.Close() })
				clients = append(clients, c)
			}
			lc, err := New(clients, redlock.WithTimeout(lockTimeout))
			if err != nil {
				t.Fatal(err)
			}
			defer lc.Close()
			_, err = lc.TryAcquire(ctxFor(t), "dup-k")
			if !errors.Is(err, redlock.ErrInvalid) || !strings.Contains(err.Error(), "are the same Redis server") {
				t.Fatalf("TryAcquire with one server twice: %v, want ErrInvalid naming both", err)
			}
			if n := ms.count(t, "dup-k"); n != 0 {
				t.Fatalf("the refused call wrote on %d masters", n)
			}
		})
	}
}
