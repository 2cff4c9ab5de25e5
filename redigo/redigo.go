// Package redigo makes a redlock Client whose masters are reached with
// redigo (github.com/gomodule/redigo): pools of package pool, a
// *redis.Pool of one's own, or addresses, Redis Cluster members included.
// The transports it makes are pipelined by default (WithPipelining);
// docs/design.md, "Pipelining (the default) and the pooled path", says how
// they use the pools. Its options mix with redlock's.
package redigo

import (
	"github.com/quorumlock/quorumlock/internal/clienthook"
	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// New returns a client for the masters behind pools, one pool per master;
// the masters must be independent servers. An empty list, a nil pool or a
// master given twice is refused with redlock.ErrInvalid. New does no
// network traffic: two addresses of one server are found at first contact
// (by run_id), and every call then fails (docs/operations.md, "Two
// addresses, one server"). A pool that can dial its own connections
// (pool.Dialer, a *redis.Pool's dial function) is pipelined; guard that
// dial with pool.GuardConn and let it honour its context, TLS handshake
// included (docs/operations.md, "TLS"). Close leaves the pools open.
func New(pools []pool.Pool, opts ...redlock.Option) (*redlock.Client, error) {
	return newClient(len(pools), opts, func(s clienthook.Settings) (clienthook.Made, error) {
		return redigot.FromPools(pools, s)
	})
}

// NewFromAddrs returns a client for the masters at addrs, each
// "host:port", a URL as pool.NewFromURL takes it, or a quorum member that
// is a Redis Cluster, cluster://HOST:PORT[+HOST:PORT...] with some of its
// nodes as seeds. It makes one pool per master and per node of a cluster
// member, configured by WithPoolOptions, which the Client's Close closes.
// With any cluster member redlock.WithClusterSlots is on, and its commands
// follow the slot's owner (docs/operations.md, "Quorum members that are
// Redis Clusters").
func NewFromAddrs(addrs []string, opts ...redlock.Option) (*redlock.Client, error) {
	return newClient(len(addrs), opts, func(s clienthook.Settings) (clienthook.Made, error) {
		return redigot.FromAddrs(addrs, s)
	})
}

func newClient(n int, opts []redlock.Option, mk func(clienthook.Settings) (clienthook.Made, error)) (*redlock.Client, error) {
	f := clienthook.NewClient.(func(int, []redlock.Option, func(clienthook.Settings) (clienthook.Made, error)) (*redlock.Client, error))
	return f(n, opts, mk)
}

// WithPipelining chooses how commands reach the masters. On (the
// default), all of the client's goroutines share one pipelined connection
// per master: concurrent operations share writes and reads, and a round
// needs no goroutine per master (docs/design.md). It needs pools that can
// dial connections of their own: those of package pool, any pool.Dialer,
// and a *redis.Pool through its DialContext or Dial field (with its dial
// settings); with other pools, or off, each command borrows a pooled
// connection and a goroutine carries it. Only New and NewFromAddrs read it.
func WithPipelining(on bool) redlock.Option { return option(redigot.Pipelining(on)) }

// WithPoolOptions configures the pools that NewFromAddrs makes; New
// ignores it.
func WithPoolOptions(opts ...pool.Option) redlock.Option {
	return option(redigot.PoolOptions(opts...))
}

func option(update func(old any) any) redlock.Option {
	return clienthook.TransportOption.(func(any, func(any) any) redlock.Option)(redigot.OptionsKey, update)
}
