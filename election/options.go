package election

import (
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// Option configures an Election (New).
type Option func(*config)

type config struct {
	ttl     time.Duration
	period  time.Duration // the watchdog's; 0: a third of the TTL
	backoff []redlock.LockOption
	fair    bool
	maxHold time.Duration
}

// WithTTL sets how long each master keeps a leader's key without an
// extension, so how long a frozen or vanished leader keeps the leadership
// (redlock.WithTTL). The default is redlock.DefaultTTL. Observe reads
// every tenth of it.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithExtendPeriod sets how often a leader's watchdog extends its key
// (redlock.WithAutoExtend); the default is a third of the TTL.
func WithExtendPeriod(d time.Duration) Option { return func(c *config) { c.period = d } }

// WithBackoff sets the bounds of a candidate's delay between attempts
// (redlock.WithBackoff).
func WithBackoff(floor, ceiling time.Duration) Option {
	return func(c *config) { c.backoff = []redlock.LockOption{redlock.WithBackoff(floor, ceiling)} }
}

// WithFair elects the candidates in the order they came (redlock.WithFair).
// Every candidate of an election must use the same mode.
func WithFair() Option { return func(c *config) { c.fair = true } }

// WithMaxHold caps a term: after d the leader's watchdog stops extending
// its key and the leadership is lost (redlock.ErrMaxHold), so that the
// next candidate takes over (redlock.WithMaxHold).
func WithMaxHold(d time.Duration) Option { return func(c *config) { c.maxHold = d } }

// lockOptions are the options of every campaign's lock, but its value.
func (c *config) lockOptions() []redlock.LockOption {
	opts := append([]redlock.LockOption{redlock.WithTTL(c.ttl), redlock.WithAutoExtend(c.period),
		redlock.WithFencing(), redlock.WithHolderFence()}, c.backoff...)
	if c.fair {
		opts = append(opts, redlock.WithFair())
	}
	if c.maxHold != 0 {
		opts = append(opts, redlock.WithMaxHold(c.maxHold))
	}
	return opts
}
