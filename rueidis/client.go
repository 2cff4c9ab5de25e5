package rueidis

import (
	"fmt"
	"reflect"

	lib "github.com/redis/rueidis"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// New returns a redlock.Client over rueidis clients, one per independent
// master: a Transport is made for each (NewTransport) and handed to
// redlock.NewWithTransports with opts. A lock is then granted by a quorum
// of len(clients)/2+1 of them; a single client (N=1) works too.
//
// The clients stay the caller's: their dialer, TLS, credentials,
// connections and hooks (rueidishook) apply to the lock's commands, and
// the redlock.Client's Close leaves them open (close them after it). Two
// clients for the same address are refused (a master given twice would
// fake a quorum), as is a nil one. The options that configure redigo
// pools (redigo.WithPipelining, redigo.WithPoolOptions) have no effect
// here; redlock.WithTimeout bounds each master's answer as usual. A
// client of a Redis Cluster is one member that is a cluster; with one,
// New turns on redlock.WithClusterSlots.
func New(clients []lib.Client, opts ...redlock.Option) (*redlock.Client, error) {
	if len(clients) == 0 {
		return nil, fmt.Errorf("%s: %w: no clients given", pkg, redlock.ErrInvalid)
	}
	for i, c := range clients {
		if isNil(c) {
			return nil, fmt.Errorf("%s: %w: client %d is nil", pkg, redlock.ErrInvalid, i)
		}
	}
	ts := make([]transport.Transport, len(clients))
	cluster := false
	for i, c := range clients {
		t := NewTransport(c)
		cluster = cluster || t.cluster
		ts[i] = t
	}
	if cluster {
		opts = append(append([]redlock.Option{}, opts...), redlock.WithClusterSlots())
	}
	c, err := redlock.NewWithTransports(ts, opts...)
	if err != nil {
		for _, t := range ts {
			_ = t.Close()
		}
		return nil, err
	}
	return c, nil
}

// pkg names this package in errors.
const pkg = "rueidis"

// isNil reports whether c is nil or a nil pointer in an interface.
func isNil(c lib.Client) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
