package goredis

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/internal/fencetest"
)

// A fence.Store works through the adapter's transport, as through a redigo
// pool: the same guarantees, with no Lua of the caller's own.
func TestTransportStore_readTurnsAwayOlderHolders(t *testing.T) {
	for _, protocol := range []int{2, 3} {
		s := startServer(t)
		c := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: protocol})
		tr := NewTransport(c)
		store, err := fence.NewTransportStore(tr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		fencetest.ReadTurnsAwayOlderHolders(ctx, t, store, "counter")
		// Without a deadline on ctx: the Store's own bound.
		if err := store.Set(context.Background(), "other", 1, []byte("x"), time.Minute); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
}
