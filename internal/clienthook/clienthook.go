// Package clienthook lets a transport package of this module make a
// redlock Client whose transports it builds from the Client's own
// settings (its per-master timeout, its stall detector), as package
// redigo does: package redlock cannot import a transport, and its config
// is unexported. It is internal: no user can import it.
//
// Package redlock sets the hooks when it is initialised; a package that
// imports redlock finds them set.
package clienthook

import (
	"time"

	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/transport"
)

// Settings is what a Client's options say to the maker of its transports.
type Settings struct {
	Timeout time.Duration // the per-master timeout
	Stalls  *stall.Stalls // the Client's stall detector
	// Values holds the options of the transport package, by the key each
	// was given to TransportOption.
	Values map[any]any
}

// Made is what a maker of transports returns.
type Made struct {
	Transports []transport.Transport // one per master
	// ClusterSlots: some master is a Redis Cluster (redlock.WithClusterSlots).
	ClusterSlots bool
	// Close, when set, runs once the Client is closed and its transports
	// with it, or when the Client could not be made: it closes what the
	// maker made besides the transports (pools).
	Close func()
}

// NewClient is redlock's
//
//	func(n int, opts []redlock.Option, make func(Settings) (Made, error)) (*redlock.Client, error)
//
// which checks opts for n masters and makes the Client of the transports
// make returns (package clienthook cannot name redlock's types: redlock
// imports it).
var NewClient any

// TransportOption is redlock's
//
//	func(key any, update func(old any) any) redlock.Option
//
// an option that sets Settings.Values[key] to update of its value so far
// (nil at first). The Client itself does not read it.
var TransportOption any
