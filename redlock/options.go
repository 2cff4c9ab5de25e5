package redlock

import (
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/internal/testhook"
	"github.com/quorumlock/quorumlock/observe"
)

// Defaults, as the Redlock specification suggests them.
const (
	// DefaultTTL is how long a lock lives on each master unless WithTTL
	// says otherwise.
	DefaultTTL = 10 * time.Second
	// DefaultTimeout bounds each command to one master: a small fraction
	// of DefaultTTL, so a hung master costs little of a lock's validity.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultDriftFactor is the share of the TTL set aside for clocks of
	// client and masters running at different rates.
	DefaultDriftFactor = 0.01
	// DefaultBackoffMin and DefaultBackoffMax bound the jittered
	// exponential delay between attempts of Acquire.
	DefaultBackoffMin = 5 * time.Millisecond
	DefaultBackoffMax = 250 * time.Millisecond
)

// Minimums, below which an option would flood the masters.
const (
	// MinAutoExtendPeriod is the shortest period WithAutoExtend accepts
	// (also when it is the default, a third of the TTL): a watchdog then
	// sends at most 100 extensions a second.
	MinAutoExtendPeriod = 10 * time.Millisecond
	// MinBackoff was the shortest delay bound WithBackoff accepts.
	//
	// Deprecated: WithBackoff's documentation states the bound (2 ms);
	// MinBackoff is removed in the next minor release.
	MinBackoff = minBackoff
)

// minBackoff is the shortest delay bound WithBackoff accepts: a waiter
// then makes at most 1,000 attempts a second (each delay is drawn from
// [d/2, d]).
const minBackoff = 2 * time.Millisecond

// expiryPrecision is added to the drift: Redis expires keys with up to one
// millisecond of error, and the TTL is sent in whole milliseconds.
const expiryPrecision = 2 * time.Millisecond

// Option configures a Client.
type Option func(*config)

type config struct {
	timeout      time.Duration
	driftFactor  float64
	clock        clock.Clock
	jitter       rand.Source // nil: math/rand/v2's global source
	logger       *slog.Logger
	observer     observe.Observer
	clusterSlots bool
	// transport holds the options of the package that makes the
	// transports (transportOption), by its keys.
	transport map[any]any
	// stalls is the detector of the client made of this config, shared
	// with the transports made for it (set by newConfig).
	stalls *stall.Stalls
}

func defaultConfig() config {
	return config{
		timeout:     DefaultTimeout,
		driftFactor: DefaultDriftFactor,
		clock:       clock.Real(),
	}
}

// newConfig returns the defaults with opts applied, checked, for a client
// of masters masters.
func newConfig(masters int, opts []Option) (config, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.check(); err != nil {
		return cfg, err
	}
	if masters == 0 {
		return cfg, fmt.Errorf("%w: no masters given", ErrInvalid)
	}
	cfg.stalls = stall.New(cfg.clock)
	return cfg, nil
}

func (c *config) check() error {
	switch {
	case c.timeout <= 0:
		return fmt.Errorf("%w: per-master timeout must be positive, got %v", ErrInvalid, c.timeout)
	case math.IsNaN(c.driftFactor) || c.driftFactor < 0 || c.driftFactor >= 1:
		return fmt.Errorf("%w: drift factor must be in [0, 1), got %v", ErrInvalid, c.driftFactor)
	case c.clock == nil:
		return fmt.Errorf("%w: clock is nil", ErrInvalid)
	}
	return nil
}

// WithTimeout bounds every command to one master: a master that has not
// answered within d counts as failed for that operation. Keep it a small
// fraction of the TTL: the time a call waits is subtracted from its
// lock's validity. While a quorum of masters has answered slower than d
// of late (a busy host, not masters down), an acquisition or an extension
// waits for a master up to twice that recent round trip, at most the
// lesser of max(d, 1 s) and a tenth of the TTL; with masters that answer
// in time it waits d. A release, which has no
// validity to protect, waits for a master up to max(d, 500 ms) (on the
// pooled path max(d, 1 s)), and returns as soon as a quorum is
// confirmed. The default is DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithDriftFactor sets the share of the TTL subtracted from a lock's
// validity for clock drift (2 ms are always added for Redis's expiry
// precision). The default is DefaultDriftFactor.
func WithDriftFactor(f float64) Option { return func(c *config) { c.driftFactor = f } }

// withClock replaces the real clock, for tests: redlock's own reach it
// through export_test.go, those of the other modules through
// internal/testhook. The default is clock.Real().
func withClock(clk clock.Clock) Option { return func(c *config) { c.clock = clk } }

// withJitter draws the client's random delays (backoff, the spread of
// woken waiters, the retries of missed releases) and a semaphore's first
// slot from src instead of math/rand/v2's global source, for a simulator
// whose runs must replay from a seed. The client serialises its draws
// from src. Tests of the other modules reach it through internal/testhook.
func withJitter(src rand.Source) Option { return func(c *config) { c.jitter = src } }

func init() {
	testhook.WithClock = withClock
	testhook.WithJitter = withJitter
}

// WithLogger receives the failures of single masters (a timeout, a
// refused connection, an error reply) and lost locks. A master's failure
// is logged at level Warn, with its index and address, when it turns the
// master failing; further failures are counted, not logged (a reminder
// with the count at most once a minute), and the master's next answer is
// logged at Info with that count. A lost lock is logged at Warn with its
// cause. Records carry the caller's context where there is one (the
// watchdog's have none). By default failures are only reported in the
// errors the operations return.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithClusterSlots says that the masters are Redis Cluster nodes (each
// master may be a node of its own cluster): every script must touch keys
// of one hash slot, so AcquireMulti rejects keys in different slots.
// Companion keys (fencing counters, fair queues) always share their lock
// key's slot. Off by default: standalone masters take any keys.
func WithClusterSlots() Option { return func(c *config) { c.clusterSlots = true } }

// transportOption is clienthook.TransportOption: an option of the
// transport package that makes the Client's transports (redigo's
// pipelining and pools), kept for it in transport.
func transportOption(key any, update func(old any) any) Option {
	return func(c *config) {
		if c.transport == nil {
			c.transport = make(map[any]any)
		}
		c.transport[key] = update(c.transport[key])
	}
}

// LockOption configures one lock: the call of Client.Acquire,
// Client.TryAcquire, Client.Do, Client.AcquireRead, Client.AcquireWrite or
// Client.AcquireMulti (or their TryAcquire forms) that takes it, or every
// acquisition of the Reentrant that Client.NewReentrant makes with it
// (Reentrant.TryAcquire ignores WithWait, as every TryAcquire does). WithFair and
// WithFencing are for plain locks (Acquire, TryAcquire, Do) only; the
// other kinds refuse them with ErrInvalid.
type LockOption func(*lockConfig)

type lockConfig struct {
	ttl        time.Duration
	wait       time.Duration // with waitSet: how long Acquire keeps trying
	waitSet    bool          // WithWait given; else Acquire waits until ctx ends
	backoffMin time.Duration
	backoffMax time.Duration
	auto       bool          // extend automatically
	autoPeriod time.Duration // how often; 0: a third of the TTL
	maxHold    time.Duration // 0: no cap
	minHold    time.Duration // 0: a release deletes at once (minhold.go)
	fair       bool
	fencing    bool
	meta       string // holder metadata; "" for none
	fenceRec   bool   // WithHolderFence: metadata always kept, the fencing token recorded beside the holder
	// A semaphore's permit (semaphore.go): its events name this kind, and
	// its acquisition is reported by the semaphore, not by each slot.
	eventKind    string
	quietAcquire bool
}

// WithTTL sets how long the lock lives on each master; it is sent in whole
// milliseconds. The lock's validity is the TTL less the time the
// acquisition took and the drift allowance. The default is DefaultTTL.
func WithTTL(d time.Duration) LockOption { return func(c *lockConfig) { c.ttl = d } }

// WithWait bounds how long an acquisition of any kind (Acquire,
// AcquireRead, AcquireWrite, AcquireMulti, Reentrant.Acquire, Do) keeps
// trying, counted from the call: its last attempt starts at the bound, or earlier if its ctx
// ends. Zero makes a single attempt, as the TryAcquire calls do. By
// default there is no bound: the call waits until it gets the lock or ctx
// ends, as sync.Mutex.Lock waits (and etcd's concurrency.Mutex.Lock): give
// ctx a deadline, or WithWait a bound, to stop waiting.
func WithWait(d time.Duration) LockOption {
	return func(c *lockConfig) { c.wait, c.waitSet = d, true }
}

// WithBackoff sets the bounds of the delay between attempts: the n-th
// delay is drawn from [d/2, d] with d = min(ceiling, floor×2ⁿ), so
// competing clients fall out of step. floor must be at least 2 ms
// and ceiling at least floor. The defaults are DefaultBackoffMin and
// DefaultBackoffMax.
func WithBackoff(floor, ceiling time.Duration) LockOption {
	return func(c *lockConfig) { c.backoffMin, c.backoffMax = floor, ceiling }
}

// WithAutoExtend makes the lock keep itself alive: a watchdog extends it
// to its TTL every period until it is released, retrying a failed
// extension while validity is left. period 0 means a third of the TTL;
// the period must be at least MinAutoExtendPeriod and shorter than the
// validity the TTL leaves.
// When extending fails for good the lock is lost: Lost() closes and Err()
// says why. Client.Do always extends automatically.
func WithAutoExtend(period time.Duration) LockOption {
	return func(c *lockConfig) { c.auto, c.autoPeriod = true, period }
}

// WithMaxHold caps how long an auto-extended lock is kept alive: after d
// from its acquisition the watchdog stops extending and the lock counts as
// lost (ErrMaxHold), so a stuck holder cannot keep it forever. The default,
// 0, sets no cap.
func WithMaxHold(d time.Duration) LockOption { return func(c *lockConfig) { c.maxHold = d } }

// WithFair serves the waiters of the key in arrival order: each waiter
// takes a place in a queue on every master (ordered by its arrival time,
// the same on all of them), and only the waiter at the head can take the
// lock. A waiter that stops trying leaves the queue after a short expiry,
// so a vanished waiter cannot block it. Every client of a key must use
// the same mode. Without it the lock is not fair: whoever retries first
// after a release may take it.
func WithFair() LockOption { return func(c *lockConfig) { c.fair = true } }

// lockConfig builds and checks the settings of one lock.
func (c *Client) lockConfig(key string, opts []LockOption) (lockConfig, error) {
	lc := lockConfig{ttl: DefaultTTL, backoffMin: DefaultBackoffMin, backoffMax: DefaultBackoffMax}
	for _, o := range opts {
		o(&lc)
	}
	if key == "" {
		return lc, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if err := c.checkTTL(lc.ttl); err != nil {
		return lc, err
	}
	switch {
	case lc.wait < 0:
		return lc, fmt.Errorf("%w: wait must not be negative, got %v", ErrInvalid, lc.wait)
	case lc.backoffMin < minBackoff || lc.backoffMax < lc.backoffMin:
		return lc, fmt.Errorf("%w: backoff needs %v <= min <= max, got min %v, max %v", ErrInvalid, minBackoff, lc.backoffMin, lc.backoffMax)
	}
	if c.clusterSlots && (lc.fair || lc.fencing) && !keys.SharesSlot(key) {
		return lc, fmt.Errorf("%w: key %q has no hash tag and holds a '}', so its companion keys (fencing counter, fair queue) "+
			"cannot share its Redis Cluster slot: give it a hash tag, such as {orders}:7", ErrInvalid, key)
	}
	lc.ttl = lc.ttl.Truncate(time.Millisecond)
	if lc.auto && lc.autoPeriod == 0 {
		lc.autoPeriod = lc.ttl / 3
	}
	budget := lc.ttl - c.timeout - c.drift(lc.ttl)
	switch {
	case lc.auto && lc.autoPeriod < MinAutoExtendPeriod:
		return lc, fmt.Errorf("%w: auto-extension period %v is shorter than the minimum %v (the default period is a third of the TTL)",
			ErrInvalid, lc.autoPeriod, MinAutoExtendPeriod)
	case lc.auto && lc.autoPeriod >= budget:
		return lc, fmt.Errorf("%w: auto-extension period %v must be positive and shorter than the validity a TTL of %v leaves (%v)",
			ErrInvalid, lc.autoPeriod, lc.ttl, budget)
	case lc.maxHold < 0:
		return lc, fmt.Errorf("%w: max hold must not be negative, got %v", ErrInvalid, lc.maxHold)
	}
	if lc.fenceRec && !lc.fencing {
		return lc, fmt.Errorf("%w: WithHolderFence records a fencing token: it needs WithFencing", ErrInvalid)
	}
	if err := checkMinHold(&lc); err != nil {
		return lc, err
	}
	if err := checkMeta(&lc); err != nil {
		return lc, err
	}
	return lc, nil
}

// maxTTL keeps PX arguments far from the overflow of Redis's millisecond
// expiry arithmetic.
const maxTTL = 100 * 365 * 24 * time.Hour

// checkTTL rejects a TTL that would leave a lock no validity even if every
// master answered at the last moment.
func (c *Client) checkTTL(ttl time.Duration) error {
	switch {
	case ttl < time.Millisecond:
		return fmt.Errorf("%w: TTL must be at least 1ms, got %v", ErrInvalid, ttl)
	case ttl > maxTTL:
		return fmt.Errorf("%w: TTL %v is longer than the maximum %v", ErrInvalid, ttl, maxTTL)
	}
	ttl = ttl.Truncate(time.Millisecond)
	if left := ttl - c.timeout - c.drift(ttl); left <= 0 {
		return fmt.Errorf("%w: TTL %v leaves no validity after the per-master timeout %v and the drift allowance %v",
			ErrInvalid, ttl, c.timeout, c.drift(ttl))
	}
	return nil
}

// drift is the time set aside for clock drift and expiry precision.
func (c *Client) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.driftFactor) + expiryPrecision
}

// once makes lc's acquisition a single attempt (the TryAcquire calls).
func (lc *lockConfig) once() { lc.wait, lc.waitSet = 0, true }
