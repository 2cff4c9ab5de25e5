package goredis

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// New returns a redlock.Client over go-redis clients, one per independent
// master: a Transport is made for each (NewTransport) and handed to
// redlock.NewWithTransports with opts. A lock is then granted by a quorum
// of len(clients)/2+1 of them; a single client (N=1) works too.
//
// The clients stay the caller's: their dialer, TLS, credentials, pool,
// hooks and instrumentation apply to the lock's commands, and the
// redlock.Client's Close leaves them open (close them after it). Two
// clients for the same address are refused (a master given twice would
// fake a quorum), as is a nil one. The options that configure redigo
// pools (redlock.WithPipelining, redlock.WithPoolOptions) have no effect
// here; redlock.WithTimeout bounds each master's answer as usual. Keep
// each client's ReadTimeout finite (go-redis's default of 3 s is): it
// bounds how long a master that stopped answering holds its transport's
// batch (see the package's documentation). A *redis.ClusterClient is one
// member that is a Redis Cluster; with one, New turns on
// redlock.WithClusterSlots (see cluster.go's notes in the package
// documentation).
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
