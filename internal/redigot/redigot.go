// Package redigot holds the redigo transports of a redlock Client: the
// pipelined one (mux), the pooled one, the Redis Cluster member that
// routes each command to its slot's owner, and their release-notice
// subscriptions. The Client reaches them only through package transport;
// docs/design.md, "The packages", draws the map.
package redigot

import (
	"time"

	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/transport"
)

// New returns the transport of the master named addr over its pool p:
// pipelined when pipelining is on and p can dial a connection of its own
// (pool.Dialer, a *redis.Pool's dial function), else pooled. timeout is
// the Client's per-master timeout; st its stall detector.
func New(addr string, p pool.Pool, pipelining bool, timeout time.Duration, st *stall.Stalls) transport.Transport {
	dial := dialerOf(p)
	if pipelining && dial != nil {
		mx := &mux{addr: addr, pool: p, dial: dial, timeout: timeout, stalls: st}
		if r, ok := p.(pool.Redactor); ok {
			mx.redact = r.RedactError
		}
		return mx
	}
	return newPooled(addr, p, dial, timeout, st)
}

// NewCluster returns the transport of the quorum member that is the
// Redis Cluster spec names (cluster://HOST:PORT[+HOST:PORT...]), which
// makes a pool of opts per node and closes them on Close.
func NewCluster(spec string, opts []pool.Option, timeout time.Duration, st *stall.Stalls) (transport.Transport, error) {
	ct, err := newClusterTransport(spec, opts, timeout, st)
	if err != nil {
		return nil, err
	}
	return ct, nil
}
