package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/clienthook"
	"github.com/quorumlock/quorumlock/internal/stall"
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
	peaks       []peak // per master, its decaying peak round trip (bound.go)
	driftFactor float64
	clock       clock.Clock
	jit         *jitter       // its random delays (nil: math/rand/v2's global source)
	realClock   bool          // clock is clock.Real(): its timers' lateness is this process's
	stalls      *stall.Stalls // this process's stalls, as the client's timers saw them (stall.go)
	logger      *slog.Logger
	obs         Observer       // nil: none (observe.go)
	health      []masterHealth // each master's state; nil without logger and observer
	closeMade   func()         // closes what the transports' maker made besides them (clienthook.Made)
	// clusterSlots: the masters are Redis Cluster nodes (WithClusterSlots).
	clusterSlots bool

	// life ends when Close is called (end): closing, its Done channel,
	// stops the locks' watchdogs, the waits and Observe, and the reads of
	// Leader and Inspect end with it (untilClosed).
	life    context.Context
	end     context.CancelFunc
	closing <-chan struct{}

	// mu guards the fields below, up to live. Lock order: finisher.gate,
	// then finisher.mu, then mu (which guards finisher.owners). round.mu
	// is never taken with mu held, nor mu with it (abandon and forget
	// take them one after the other); a Lock's op comes before round.mu,
	// and a transport's own lock after it (Silence, in leg.expire). An
	// event's mu is a leaf: what waits for it runs outside it.
	mu        sync.Mutex
	closed    bool
	releasing map[string]*round // per key, the newest release whose legs still run (transports not Ordered)
	chains    map[string]*round // per key and holder (chainID), its newest round whose legs still run (idem)
	workers   sync.WaitGroup    // every leg of a round, retry, watchdog and subscriber still running
	waker     *waker
	// allOrdered: every master's transport is Ordered: rounds need no
	// goroutines and no chaining.
	allOrdered  bool
	someOrdered bool     // at least one master's transport is Ordered
	fin         finisher // retries of releases and rollbacks that masters missed
	ident       identity // the masters' run_ids: two addresses of one server are refused
	// live lists the rounds whose legs still run (under mu), for Close to
	// complete what a transport left unanswered (abandon).
	live *round
	// abandoned: Close completed, itself, what the transports left
	// unanswered after their Close; nothing is sent any more.
	abandoned atomic.Bool
	// beforeWait, when set (tests), runs after a failed attempt, before
	// the waiter registers for release notices.
	beforeWait func()
	// settled, when set (tests), runs as a waiter begins a pause with no
	// re-check pending: its latest attempt is over.
	settled func()
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
		peaks:        make([]peak, len(ts)),
		addrs:        make([]string, len(ts)),
		quorum:       len(ts)/2 + 1,
		timeout:      cfg.timeout,
		driftFactor:  cfg.driftFactor,
		clock:        cfg.clock,
		jit:          newJitter(cfg.jitter),
		realClock:    cfg.clock == clock.Real(),
		stalls:       cfg.stalls,
		logger:       cfg.logger,
		obs:          guard(cfg.observer, cfg.logger),
		clusterSlots: cfg.clusterSlots,
		releasing:    make(map[string]*round),
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
	if c.logger != nil || c.obs != nil {
		c.health = make([]masterHealth, len(ts))
	}
	if len(ts) == 1 {
		// One master cannot be counted twice: nothing to identify, and
		// its grants count from the first round.
		c.ident.settled.Store(true)
	}
	c.waker = newWaker(c)
	c.fin.init(len(ts), c.jit)
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
// addresses (identity.go).
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

// Close stops new work and ends all the client runs: the commands in
// flight get at most one per-master timeout to be answered, then what is
// left fails with ErrClosed; waiting Acquire calls return ErrClosed,
// auto-extended locks count as lost (ErrClosed), elections' Observe loops
// end, Done is closed, the pools NewFromAddrs made are closed, and Close
// waits for every goroutine the client started. Locks not released, and
// retries of releases a master missed, are dropped: their keys expire at
// their TTL. Close is idempotent; on a Client New did not make it returns
// ErrInvalid. Its bounds on each path: docs/design.md, "Closing a client".
func (c *Client) Close() error {
	if err := c.valid(); err != nil {
		return err
	}
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		c.end()
	}
	c.mu.Unlock()
	c.waker.close()
	idle := make(chan struct{})
	go func() {
		c.workers.Wait()
		close(idle)
	}()
	within(idle, c.timeout)
	for _, m := range c.masters {
		m.t.Close()
	}
	// A transport's Close completes what it still held. One that breaks
	// that contract gets one more per-master timeout; then the client
	// completes what is still unanswered itself (a late completion from
	// the transport is ignored).
	if !within(idle, c.timeout) {
		c.abandon()
		<-idle
	}
	if c.closeMade != nil {
		c.closeMade()
	}
	c.stalls.Stop()
	return nil
}

// Done returns a channel that is closed when Close is called, before
// Close waits for the commands in flight: from then on the client starts
// nothing, and every call that would talk to the masters fails with an
// error matching ErrClosed. Like context.Context's Done, it lets what
// lives as long as the client stop with it (Election.Observe ends on it).
// Successive calls return the same channel; on a Client New did not make,
// which can never be closed, it returns nil.
func (c *Client) Done() <-chan struct{} {
	if c == nil {
		return nil
	}
	return c.closing
}

// closedErr returns an error matching ErrClosed, naming what and key,
// once Close was called; else nil.
func (c *Client) closedErr(what, key string) error {
	select {
	case <-c.closing:
		return fmt.Errorf("%w: %s %q", ErrClosed, what, key)
	default:
		return nil
	}
}

// untilClosed returns a context that ends with ctx, or when Close is
// called (its cause then ErrClosed): for the reads that Close cuts short.
func (c *Client) untilClosed(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.life, func() { cancel(ErrClosed) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// within waits for ch to close, at most d; it reports whether it did.
func within(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// Acquire takes the lock on key, retrying until it succeeds or ctx ends,
// or, with WithWait(d), until d is spent (no bound by default: give ctx a
// deadline or use WithWait; TryAcquire tries once). Between attempts it
// waits for a master to announce the key's release, with a jittered
// backoff and a fallback poll as bounds; a woken attempt asks the key's
// pilot first (docs/design.md, "Waiting without polling"). On failure the
// error matches ErrNotAcquired, and ctx.Err() when ctx ended; it is a
// *QuorumError that tells what each master answered. No failed attempt
// leaves the key on any master.
func (c *Client) Acquire(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	called := c.callStart()
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	lc, err := c.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	return c.acquire(ctx, called, key, &lc, c.plainKind(key, &lc))
}

// acquire is Acquire for a lock of any kind. begun is when the caller's
// call started, before the client's checks (which on its first call
// identify the masters, waiting up to a per-master timeout): the wait
// bound, Lock.Waited and the observer count from it. Zero: now.
func (c *Client) acquire(ctx context.Context, begun time.Time, key string, lc *lockConfig, k kind) (got *Lock, err error) {
	k = withHolderMeta(k, key, lc)
	if begun.IsZero() {
		begun = c.clock.Now()
	}
	giveUp := begun.Add(lc.wait) // with lc.waitSet
	var wt *waiting              // set once the first attempt failed
	var last *round              // the latest attempt
	tries := 0
	// Read before the first attempt: whether a release between its
	// refusal and the registration could go unheard (waiting.recheck).
	mark := c.waker.mark(key, k)
	if c.obs != nil && !lc.quietAcquire {
		defer func() { c.observeAcquire(ctx, key, kindName(k, lc.fencing), begun, tries, last, got, err) }()
	}
	defer func() {
		if wt != nil {
			wt.stop(err == nil, k.shared())
		}
		if k.leaves() && err != nil && last != nil {
			// Give the place in the queue (or the writer's intent) up now
			// rather than at its expiry: in the background, each master
			// bounded, after the latest attempt's command on that master.
			_, _ = c.startRound(context.Background(), opLeave, key, "", 0, last, k, nil)
		}
	}()
	lead := -1             // the master the next attempt asks first (a woken waiter's, lead.go), or none
	var waitFrom time.Time // when this call began to wait (real time), for leadDelay
	hints := 0             // attempts made at a hinted moment since the last wake (expiry.go)
	for attempt := 0; ; attempt++ {
		l, r, err := c.attempt(ctx, key, lc, k, lead)
		lead = -1
		if r != nil {
			last = r
			tries++
		}
		if err == nil {
			l.waited, l.attempts = c.clock.Since(begun), tries
			return l, nil
		}
		if !isQuorumError(err) {
			return l, err
		}
		if cerr := ctx.Err(); cerr != nil {
			// ctx ended after the attempt's round was counted: the error
			// matches ctx.Err() all the same, as documented.
			var qe *QuorumError
			if asQuorumError(err, &qe) && qe.ctxErr == nil {
				qe.ctxErr = cerr
			}
			return nil, err
		}
		// The last attempt is made at the wait bound itself: a delay
		// that would pass it is cut short.
		left := time.Duration(math.MaxInt64)
		if lc.waitSet {
			if left = giveUp.Sub(c.clock.Now()); left <= 0 {
				return nil, err
			}
		}
		if wt == nil {
			if c.beforeWait != nil {
				c.beforeWait()
			}
			waitFrom = time.Now()
			wt = c.waker.wait(k.keys(key), mark, k.leaves() && !k.queued(), arrivalOf(k))
			if pk, ok := k.(plainKind); ok {
				// Its next attempts learn when the holder's key runs out.
				pk.waiting = true
				k = pk
			}
		} else {
			c.waker.revive()
		}
		// A refused waiting attempt said when the key runs out: try again
		// then, if sooner (expiry.go). Each such attempt refused again
		// doubles the least delay a hint may give.
		in, told := last.freeIn(c.quorum, time.Now())
		delay, hint := hinted(wt.delay(lc, attempt, k.leaves(), err), in, told, hintFloor(lc, hints))
		delay = min(delay, left)
		switch why, next := c.pause(ctx, wt, key, k, delay, waitFrom); why {
		case resumeCtx:
			var qe *QuorumError
			if asQuorumError(err, &qe) {
				qe.ctxErr = ctx.Err()
			}
			return nil, err
		case resumeReleased:
			// The backoff starts over: try again now, and should that
			// fail, soon again.
			attempt, lead, hints = -1, next, 0
		case resumeDelay:
			if hint {
				hints++
			}
		}
	}
}

// resume is why a waiter's pause between two attempts ended (pause).
type resume uint8

const (
	resumeDelay    resume = iota // its delay (backoff or fallback poll) passed
	resumeRecheck                // its subscriptions are live: a release before them may have gone unheard
	resumeReleased               // a release of its key was announced
	resumeClosing                // the client is closing: the next attempt fails at once with ErrClosed
	resumeCtx                    // ctx ended: the waiter gives up
)

// pause is Acquire's wait between a failed attempt and the next, for a
// waiter registered as wt (waitFrom: when, in real time, it first
// registered). It ends at the first of: delay passed (on the client's
// clock); the recheck of a new waiter — once every key's channel is live
// on every master (checked every recheckPoll, real time, for at most the
// per-master timeout), since a release between the first refusal and the
// registration may have gone unheard; a release announced; Close; ctx.
// It returns why, and for resumeReleased the master the next attempt asks
// first (lead.go), or -1. Before a woken attempt it waits the woken
// waiter's delay (spread or leadDelay); it sends nothing itself.
func (c *Client) pause(ctx context.Context, wt *waiting, key string, k kind, delay time.Duration, waitFrom time.Time) (why resume, lead int) {
	if why = c.waitOut(ctx, wt, k, delay); why == resumeReleased {
		return why, c.woken(ctx, wt, key, k, waitFrom)
	}
	return why, -1
}

// waitOut is the wait of pause and of a semaphore's waiter
// (Semaphore.pause): it ends at the first of delay, the recheck of a new
// waiter (then after the spread of a waiter of kind k), a release
// announced to wt, Close and ctx, and says which.
func (c *Client) waitOut(ctx context.Context, wt *waiting, k kind, delay time.Duration) resume {
	t := c.clock.NewTimer(delay)
	defer t.Stop()
	var poll <-chan time.Time
	var pollT *time.Timer
	var pollEnd time.Time
	if c.settled != nil && !wt.recheck {
		c.settled()
	}
	if wt.recheck {
		wt.recheck = false
		pollT, pollEnd = time.NewTimer(0), time.Now().Add(c.timeout)
		defer pollT.Stop()
		poll = pollT.C
	}
	for {
		select {
		case <-poll:
			if !wt.live() && time.Now().Before(pollEnd) {
				pollT.Reset(recheckPoll)
				continue
			}
			t.Stop()
			c.spread(ctx, k)
			return resumeRecheck
		case <-t.C():
			return resumeDelay
		case <-wt.ch:
			return resumeReleased
		case <-c.closing:
			return resumeClosing
		case <-ctx.Done():
			return resumeCtx
		}
	}
}

// woken prepares the attempt of a waiter a release woke, and returns the
// master it asks first, or -1. With several masters, contenders of other
// clients were woken by the same release: the attempt asks the key's lead
// master first (lead.go), which grants it to one of them, and the rest of
// the masters only once it granted. When no master can lead (each failed
// lately), a short random spread (real time, shorter than a few round
// trips) lets one of them reach a quorum before the others split the
// vote. On a single master there is no pilot, but the waiter waits the
// same age-weighted delay (leadDelay) when it has rivals in other
// clients. In fair mode only the head of the queue can win: a fair waiter is
// not led (no vote to split, and its attempts must refresh its place on
// every master). A waiting writer is led; its backoff attempts, never
// led, renew its intent on every master (docs/design.md, "Waiters that
// leave a mark").
func (c *Client) woken(ctx context.Context, wt *waiting, key string, k kind, waitFrom time.Time) int {
	if len(c.masters) == 1 && !k.queued() {
		// One master, no pilot: the woken waiters of every client race to
		// it all the same, and the age-weighted delay keeps the client
		// told first from winning every race.
		if wt.rivals() != 1 {
			c.leadDelay(ctx, time.Since(waitFrom))
		}
		return -1
	}
	lead := c.leadFor(key)
	if lead < 0 || k.queued() {
		c.spread(ctx, k)
		return -1
	}
	// That master's notice wakes a waiter, should the lead have changed
	// by then (keyWaiters.announce).
	wt.asking(key, lead)
	if wt.rivals() != 1 {
		// Others in other clients were woken too (or may have been: the
		// notice did not say).
		c.leadDelay(ctx, time.Since(waitFrom))
	}
	return lead
}

// TryAcquire makes exactly one attempt to take the lock on key. On failure
// the error matches ErrNotAcquired (see Acquire); a fair waiter
// (WithFair) leaves the queue again, as Acquire's does when it gives up.
// A WithWait among opts is ignored, as by every TryAcquire form.
func (c *Client) TryAcquire(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	called := c.callStart()
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	lc, err := c.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	lc.once() // acquire's clean-up leaves the queue
	return c.acquire(ctx, called, key, &lc, c.plainKind(key, &lc))
}

// wakeSpread bounds the random delay of a woken waiter on several masters.
const wakeSpread = time.Millisecond

// spread waits the random moment of a woken waiter on several masters
// (at most wakeSpread, real time), unless its lock is queued (fair).
func (c *Client) spread(ctx context.Context, k kind) {
	if len(c.masters) == 1 || k.queued() {
		return
	}
	j := time.NewTimer(c.jit.n(wakeSpread))
	defer j.Stop()
	select {
	case <-j.C:
	case <-ctx.Done():
	}
}

// leadAge is the wait after which a woken waiter's delay before it asks
// the lead master is halved (leadDelay).
const leadAge = time.Millisecond

// leadDelay waits before an attempt that asks the lead master first
// (lead.go), real time: at random between half and all of
// wakeSpread×leadAge/(leadAge+waited), so that of the waiters one release
// woke, in any process, those that have waited longest tend to ask first,
// and none is favoured for being told first (Redis tells the subscribers
// of a channel in the order they subscribed). A client whose own release
// of the key a waiter heard (waited 0) waits the longest.
func (c *Client) leadDelay(ctx context.Context, waited time.Duration) {
	d := time.Duration(float64(wakeSpread) * float64(leadAge) / float64(leadAge+max(waited, 0)))
	j := time.NewTimer(d/2 + c.jit.n(d-d/2+1))
	defer j.Stop()
	select {
	case <-j.C:
	case <-ctx.Done():
	}
}

// recheckPoll spaces the checks of a new waiter's subscriptions before
// its second attempt.
const recheckPoll = 500 * time.Microsecond

// backoff returns the delay before retry number attempt+1: a random
// duration in [d/2, d] where d = min(ceiling, floor×2^attempt), drawn
// from j.
func backoff(j *jitter, floor, ceiling time.Duration, attempt int) time.Duration {
	d := ceiling
	if attempt < 30 {
		if e := floor << attempt; e > 0 && e < ceiling {
			d = e
		}
	}
	half := d / 2
	return half + j.n(d-half+1)
}

// attempt makes one acquisition attempt of a lock of kind k, with the
// token k gives (a fresh one, or a reentrant lock's owner).
//
// With lead ≥ 0, master lead is asked first and the others only once it
// granted (a woken waiter, lead.go).
func (c *Client) attempt(ctx context.Context, key string, lc *lockConfig, k kind, lead int) (*Lock, *round, error) {
	ttl := lc.ttl
	if err := ctx.Err(); err != nil {
		return nil, nil, &QuorumError{Op: "acquire", Key: key, Masters: len(c.masters), Quorum: c.quorum,
			sentinel: ErrNotAcquired, ctxErr: err, addrs: c.addrs}
	}
	k = kindForAttempt(k)
	token := k.token(c.jit)
	start := c.clock.Now()
	var fence *fencing
	if lc.fencing {
		fence = &fencing{counter: FenceKey(key)}
	}
	r, err := c.startLed(ctx, opAcquire, key, token, ttl, nil, k, fence, lead)
	if err != nil {
		return nil, nil, err
	}
	t := c.collect(ctx, r)
	// dup: the round counted its grants by the masters' identities
	// (countGate), and the masters were found to include one server twice
	// meanwhile, or Close stopped the probe (which then identified
	// nothing more): the attempt fails with that error. A round that failed while the
	// first probe ran waits for it (it started before the round, so that
	// is within the round's budget and probeGrace) to tell the duplicate
	// on this call; one that succeeded waited already.
	var dup error
	if t.gate != nil {
		t.uncounted = t.gate.uncounted(t.votes)
		if t.ctxErr == nil {
			dup = c.identified(ctx)
		} else if d := c.ident.dup.Load(); d != nil {
			dup = d.err
		}
		if dup == nil && c.ident.stopped.Load() {
			dup = c.closedErr("acquire", key)
		}
		if t.lost > 0 {
			c.reprobeGranted(t.votes)
		}
	}
	if t.ok(c.quorum) {
		// A led round's last legs may still be on their way to be sent
		// (the lead's answer readies them one by one): no later command
		// of the holder (a fence commit, its release) may reach their
		// masters first, on a transport that keeps the order of sending.
		r.sentLed.Wait()
	}
	validity := ttl - c.clock.Since(start) - c.drift(ttl)
	// failed describes a failure after the acquisition's own round: the
	// fence commit's.
	var failed *QuorumError
	var token64 uint64
	if lc.fencing && t.ok(c.quorum) && t.ctxErr == nil && validity > 0 && dup == nil {
		ct, cr, ft, err := c.commitFence(ctx, r, &t, ttl)
		if err != nil {
			// The commit could not start (the client is closing): undo
			// the acquisition like any failed attempt.
			r.decide(true)
			return nil, r, err
		}
		validity = ttl - c.clock.Since(start) - c.drift(ttl)
		if !ct.ok(c.quorum) || ct.ctxErr != nil || validity <= 0 {
			failed = c.quorumError(ct, cr, ErrNotAcquired, ct.ok(c.quorum) && ct.ctxErr == nil)
			t.ctxErr = ct.ctxErr
		}
		token64 = ft
	}
	if t.ok(c.quorum) && t.ctxErr == nil && validity > 0 && failed == nil && dup == nil {
		r.decide(false)
		l := newLock(c, r, start, start.Add(ttl-c.drift(ttl)), lc)
		l.fence = token64
		l.votes = t.votes
		if k.renews() {
			// A reentrant or read-write acquisition sets the expiry of a
			// hold that exists: late, it may shorten a later extension.
			l.track(r, &t, ttl)
		}
		if lc.auto {
			l.startMonitor()
		}
		return l, r, nil
	}
	r.decide(true)
	// Wait for the rollback on the masters that granted so far (one round
	// trip), so that a failed attempt leaves no key where it was granted,
	// but not past ctx: the rollback then goes on in the background.
	// Masters that failed or have not answered yet roll back in the
	// background, each right after its own SET, bounded by the per-master
	// timeout (on an Ordered transport, by its own bound: the stall bound
	// of a pipelined connection).
	if t.ctxErr == nil {
		rolled := r.legsEnded(t.votes)
		var bound <-chan time.Time
		if c.someOrdered {
			// An Ordered transport keeps a rollback behind a slow SET
			// past any deadline: wait one per-master timeout at most.
			wait := c.clock.NewTimer(c.timeout)
			defer wait.Stop()
			bound = wait.C()
		}
		select {
		case <-rolled:
		case <-bound:
		case <-ctx.Done():
		case <-c.closing: // Close bounds what is left
		}
	}
	if dup != nil {
		return nil, r, dup
	}
	if failed != nil {
		return nil, r, failed
	}
	return nil, r, c.quorumError(t, r, ErrNotAcquired, t.ok(c.quorum) && t.ctxErr == nil)
}

func isQuorumError(err error) bool {
	var qe *QuorumError
	return asQuorumError(err, &qe)
}

func asQuorumError(err error, target **QuorumError) bool {
	return errors.As(err, target)
}

// logFailure records one master's failure outside a round (the wake-up
// subscription): see masterFailed.
func (c *Client) logFailure(op opKind, key string, m *master, err error) {
	c.masterFailed(context.Background(), op, key, m, err)
}
