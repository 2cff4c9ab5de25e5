package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/clienthook"
	"github.com/quorumlock/quorumlock/internal/finish"
	"github.com/quorumlock/quorumlock/internal/health"
	"github.com/quorumlock/quorumlock/internal/ident"
	"github.com/quorumlock/quorumlock/internal/jitter"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/internal/waker"
	"github.com/quorumlock/quorumlock/observe"
)

// Client acquires locks on a set of independent Redis masters. A lock is
// granted when a quorum of N/2+1 masters grant it; a single master (N=1)
// runs through the same code.
//
// A Client is safe for concurrent use. Close it when done: Close gives the
// commands still in flight at most one per-master timeout.
type Client struct {
	masters  []master
	failedAt []atomic.Int64 // per master, when a command to it last failed (unix ns; leadFor)
	addrs    []string
	quorum   int

	timeout     time.Duration
	bound       *stall.Bound // how long its rounds wait for a master (the adaptive bound)
	driftFactor float64
	clock       clock.Clock
	jit         *jitter.Rand  // its random delays (nil: math/rand/v2's global source)
	realClock   bool          // clock is clock.Real(): its timers' lateness is this process's
	stalls      *stall.Stalls // this process's stalls, as the client's timers saw them (stall.go)
	logger      *slog.Logger
	obs         observe.Observer // nil: none (observe.go)
	health      *health.Masters  // each master's state; nil without logger and observer
	closeMade   func()           // closes what the transports' maker made besides them (clienthook.Made)
	// clusterSlots: the masters are Redis Cluster nodes (WithClusterSlots).
	clusterSlots bool
	// lastArrival is the latest fair waiter's arrival (µs, fairness): each
	// is after the one before, so that the masters order one client's fair
	// waiters as the client does.
	lastArrival atomic.Int64

	// life ends when Close is called (end): closing, its Done channel,
	// stops the locks' watchdogs, the waits and Observe, and the reads of
	// Leader and Inspect end with it (untilClosed).
	life    context.Context
	end     context.CancelFunc
	closing <-chan struct{}

	// mu guards the fields below, up to live. Lock order: the finisher's
	// gate, then its mu (it calls addWorker under it: finish.Finisher),
	// then mu (which guards the finisher's owners: Finisher.Newest, called
	// under mu, takes no lock of the finisher). The waker's lock comes
	// before mu (addWorker, as it starts a subscriber: waker.Waker).
	// round.mu is never taken with mu held, nor mu with it (abandon and
	// forget take them one after the other); a Lock's op comes before
	// round.mu, and a transport's own lock after it (Silence, in
	// leg.expire). An event's mu is a leaf: what waits for it runs
	// outside it. So is the lock of jit (jitter.Rand), taken under the
	// finisher's mu and the waker's.
	mu        sync.Mutex
	closed    bool
	releasing map[string]*round // per key, the newest release whose legs still run (transports not Ordered)
	leaving   map[string]*round // per key, the newest leave whose legs still run (idem)
	chains    map[string]*round // per key and holder (chainID), its newest round whose legs still run (idem)
	workers   sync.WaitGroup    // every leg of a round, retry, watchdog and subscriber still running
	waker     *waker.Waker
	// allOrdered: every master's transport is Ordered: rounds need no
	// goroutines and no chaining.
	allOrdered  bool
	someOrdered bool            // at least one master's transport is Ordered
	fin         finish.Finisher // retries of releases and rollbacks that masters missed
	// ident holds the masters' run_ids: two addresses of one server are
	// refused. Its mutex comes after waker.mu (notify works out a pilot
	// with leadFor, which reads ident.Known) and before mu (its probe's
	// identHost.AddWorker).
	ident ident.Identity
	// live lists the rounds whose legs still run (under mu), for Close to
	// complete what a transport left unanswered (abandon).
	live *round
	// abandoned: Close completed, itself, what the transports left
	// unanswered after their Close; nothing is sent any more.
	abandoned atomic.Bool
	// beforeWait, when set (tests), runs after a failed attempt, before
	// the waiter registers for release notices.
	beforeWait func()
	// handOver: plain locks without metadata or fencing keep a line of
	// waiters on each master, and a release hands the key over to the
	// one first in line once it has waited handOverAge (kind.go). Off
	// until its measurements are in; the scripts of a client with it off
	// are those of the previous release.
	handOver        bool
	lastLineArrival atomic.Int64 // lineArrival
}

type master struct {
	index   int
	addr    string
	t       Transport
	ordered bool // t is Ordered
}

// NewWithTransports returns a client for the masters behind ts, one
// Transport per master, such as the go-redis adapter of the nested module
// github.com/quorumlock/quorumlock/goredis. The masters must be
// independent servers: two transports with the same Addr (compared
// without case) are rejected, as are an empty list and a nil transport.
// Options of package redigo (WithPoolOptions, WithPipelining) do not
// apply: the transports are configured on their own. Close closes the transports
// (Transport.Close), after the commands in flight had one per-master
// timeout to be answered.
func NewWithTransports(ts []Transport, opts ...Option) (*Client, error) {
	cfg, err := newConfig(len(ts), opts)
	if err != nil {
		return nil, err
	}
	for i, t := range ts {
		if isNil(t) {
			return nil, fmt.Errorf("%w: transport %d is nil", ErrInvalid, i)
		}
	}
	return newClient(slices.Clone(ts), cfg)
}

// isNil reports whether v is nil or a nil pointer in an interface.
func isNil(v any) bool {
	return v == nil || (reflect.ValueOf(v).Kind() == reflect.Pointer && reflect.ValueOf(v).IsNil())
}

// newClient makes the Client of transports ts, one per master.
func newClient(ts []Transport, cfg config) (*Client, error) {
	c := &Client{
		masters:      make([]master, len(ts)),
		failedAt:     make([]atomic.Int64, len(ts)),
		addrs:        make([]string, len(ts)),
		quorum:       len(ts)/2 + 1,
		timeout:      cfg.timeout,
		driftFactor:  cfg.driftFactor,
		clock:        cfg.clock,
		jit:          jitter.New(cfg.jitter),
		realClock:    cfg.clock == clock.Real(),
		stalls:       cfg.stalls,
		logger:       cfg.logger,
		obs:          health.Guard(cfg.observer, cfg.logger),
		clusterSlots: cfg.clusterSlots,
		releasing:    make(map[string]*round),
		leaving:      make(map[string]*round),
		allOrdered:   true,
	}
	c.life, c.end = context.WithCancel(context.Background())
	c.closing = c.life.Done()
	seen := make(map[string]int, len(ts))
	for i, t := range ts {
		addr := withoutCredentials(t.Addr())
		id := strings.ToLower(addr)
		if j, dup := seen[id]; dup {
			return nil, fmt.Errorf("%w: masters %d and %d are the same master (%s): a master given twice would fake a quorum",
				ErrInvalid, j, i, addr)
		}
		seen[id] = i
		o, ok := t.(Ordered)
		ordered := ok && o.Ordered()
		c.masters[i] = master{index: i, addr: addr, t: t, ordered: ordered}
		c.addrs[i] = addr
		c.allOrdered = c.allOrdered && ordered
		c.someOrdered = c.someOrdered || ordered
	}
	c.bound = stall.NewBound(c.clock, c.stalls, len(ts), c.quorum, c.timeout, c.someOrdered)
	if c.logger != nil || c.obs != nil {
		c.health = health.New(c.addrs, c.logger, c.obs)
	}
	c.ident.Init(identHost{c}, ident.Config{Addrs: c.addrs, Timeout: c.timeout, Closing: c.closing, Stalls: c.stalls, Invalid: ErrInvalid})
	c.waker = newWaker(c)
	c.initFinisher()
	return c, nil
}

// withoutCredentials drops the user information a transport's Addr should
// not have (Transport.Addr): "redis://user:pass@host:port" names the master
// as "redis://host:port", "user:pass@host:port" as "host:port". The
// address appears in every error and log line about the master.
func withoutCredentials(addr string) string {
	at := strings.LastIndexByte(addr, '@')
	if at < 0 {
		return addr
	}
	start := 0
	if i := strings.Index(addr, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	return addr[:start] + addr[at+1:]
}

func init() {
	clienthook.NewClient = newMade
	clienthook.TransportOption = transportOption
}

// newMade is clienthook.NewClient: the Client of n masters whose
// transports mk makes from its settings (redigo.New, redigo.NewFromAddrs).
func newMade(n int, opts []Option, mk func(clienthook.Settings) (clienthook.Made, error)) (*Client, error) {
	cfg, err := newConfig(n, opts)
	if err != nil {
		return nil, err
	}
	m, err := mk(clienthook.Settings{Timeout: cfg.timeout, Stalls: cfg.stalls, Values: cfg.transport})
	if err != nil {
		return nil, err
	}
	cfg.clusterSlots = cfg.clusterSlots || m.ClusterSlots
	c, err := newClient(m.Transports, cfg)
	if err != nil {
		for _, t := range m.Transports {
			t.Close()
		}
		if m.Close != nil {
			m.Close()
		}
		return nil, err
	}
	c.closeMade = m.Close
	return c, nil
}

// Masters returns the number of masters (0 for a Client New did not make).
func (c *Client) Masters() int {
	if c == nil {
		return 0
	}
	return len(c.masters)
}

// Quorum returns how many masters must agree: N/2+1 (0 for a Client New
// did not make).
func (c *Client) Quorum() int {
	if c == nil {
		return 0
	}
	return c.quorum
}

// valid rejects a nil Client and the zero value, which New did not make.
func (c *Client) valid() error {
	if c == nil || len(c.masters) == 0 {
		return fmt.Errorf("%w: this Client was not made by New or NewFromAddrs", ErrInvalid)
	}
	return nil
}

// callStart is when a call starts (the zero time on a Client New did not
// make, which check rejects).
func (c *Client) callStart() time.Time {
	if c == nil || c.clock == nil {
		return time.Time{}
	}
	return c.clock.Now()
}

// check rejects a Client New did not make and a nil context, and, at
// first contact and from then on, masters that are one server under two
// addresses (internal/ident).
func (c *Client) check(ctx context.Context) error {
	if err := c.valid(); err != nil {
		return err
	}
	if err := checkCtx(ctx); err != nil {
		return err
	}
	return c.identify()
}

// addWorker counts one more goroutine in c.workers, which Close waits
// for, unless the client is closed; it reports whether it did.
func (c *Client) addWorker() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.workers.Add(1)
	return true
}

// logFailure records one master's failure outside a round (the wake-up
// subscription): logged when it turns m failing, counted otherwise
// (health.Masters.Failed).
func (c *Client) logFailure(op opKind, key string, m *master, err error) {
	c.health.Failed(context.Background(), m.index, op.String(), key, err)
}
