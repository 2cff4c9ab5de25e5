package redlock

import (
	"github.com/quorumlock/quorumlock/internal/clienthook"
	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/pool"
)

// newRedigo is redigo.New for the package's internal tests, which cannot
// import package redigo (it imports this one).
func newRedigo(pools []pool.Pool, opts ...Option) (*Client, error) {
	return newMade(len(pools), opts, func(s clienthook.Settings) (clienthook.Made, error) {
		return redigot.FromPools(pools, s)
	})
}

// newRedigoFromAddrs is redigo.NewFromAddrs for the internal tests.
func newRedigoFromAddrs(addrs []string, opts ...Option) (*Client, error) {
	return newMade(len(addrs), opts, func(s clienthook.Settings) (clienthook.Made, error) {
		return redigot.FromAddrs(addrs, s)
	})
}

// withPipelining is redigo.WithPipelining for the internal tests.
func withPipelining(on bool) Option {
	return transportOption(redigot.OptionsKey, redigot.Pipelining(on))
}
