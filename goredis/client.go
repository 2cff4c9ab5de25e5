package goredis

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// New returns a redlock.Client over go-redis clients, one per independent
// master (NewTransport for each, then redlock.NewWithTransports with
// opts); a quorum is len(clients)/2+1. The clients stay the caller's:
// their settings apply to the lock's commands, and Close leaves them open.
// A nil client, or two for one address, is refused; WithPipelining and
// WithPoolOptions have no effect here. Keep each client's ReadTimeout
// finite (the default 3 s is): it bounds how long a silent master holds
// its transport's batch. A *redis.ClusterClient is one member that is a
// Redis Cluster, and turns on WithClusterSlots (package documentation).
func New(clients []redis.UniversalClient, opts ...redlock.Option) (*redlock.Client, error) {
	if len(clients) == 0 {
		return nil, fmt.Errorf("goredis: %w: no go-redis clients given", redlock.ErrInvalid)
	}
	for i, c := range clients {
		if isNilClient(c) {
			return nil, fmt.Errorf("goredis: %w: client %d is nil", redlock.ErrInvalid, i)
		}
	}
	ts := make([]transport.Transport, len(clients))
	for i, c := range clients {
		ts[i] = NewTransport(c)
	}
	c, err := redlock.NewWithTransports(ts, withClusterSlots(clients, opts)...)
	if err != nil {
		for _, t := range ts {
			_ = t.Close()
		}
		return nil, err
	}
	return c, nil
}

// isNilClient reports whether c is nil or a nil pointer of one of
// go-redis's client types.
func isNilClient(c redis.UniversalClient) bool {
	switch v := c.(type) {
	case nil:
		return true
	case *redis.Client:
		return v == nil
	case *redis.ClusterClient:
		return v == nil
	case *redis.Ring:
		return v == nil
	}
	return false
}
