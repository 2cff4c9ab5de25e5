// Package sim is a deterministic-schedule simulator of a quorumlock
// quorum: N simulated masters that run the library's own Lua scripts
// (gopher-lua over an in-memory keyspace), reached through the public
// transport seam (transport.Transport), with faults drawn from a seed,
// inside a testing/synctest bubble whose virtual clock moves on whenever
// every goroutine waits. Many clients take, extend and release locks on a
// few keys while the simulator checks, at every step, that no two holders
// of a key are valid at once (Lock.Until against the virtual clock), that
// fencing tokens never go backwards, that every call returns within its
// ctx, and, when the run ends, that nothing is left running.
//
// The package is a module of its own, unpublished: its dependencies
// (gopher-lua, Go 1.25's synctest) never reach the library's. See
// docs/testing.md, "The simulator".
package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/testhook"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// Config is one simulation: everything in it, and the seed, fixes the
// operations, the faults and their virtual times.
type Config struct {
	Seed    uint64
	Masters int // 0: 3 or 5, from the seed
	Clients int // Clients × Workers goroutines take locks
	Workers int
	Keys    int
	Ops     int  // completed lock operations (Acquire, Extend, Release calls) to run
	Faults  bool // schedule faults
	Trace   bool // record the masters' commands in the keys' histories
	// Reorder makes a frozen master, when it resumes, read its
	// connections in no fixed order (as redis-server does) instead of in
	// the order their first waiting command arrived. See docs/testing.md
	// for what it finds.
	Reorder bool
	// Kinds, when set, are the only operations the workers draw (to
	// look for one kind's bugs).
	Kinds []OpKind
	// Stop, when set, ends the run early (a wall-clock budget).
	Stop *atomic.Bool
	// Script, when set, is what the run does instead of drawing from the
	// seed: these operations and faults, at their virtual times (a shrunk
	// failure's replay). The seed still draws the links' delays and
	// losses and the masters' rates.
	Script *Script
}

// A Script is the operations and faults of a run, as drawn from its
// seed, or a part of them.
type Script struct {
	Ops    []OpSpec
	Faults []FaultSpec
}

// Stats counts what a run did.
type Stats struct {
	Acquires, Grants, Extends, Extended, Releases, Released atomic.Int64
	Leaders                                                 atomic.Int64 // Election.Leader calls
	Faults                                                  atomic.Int64
	DupCompletions                                          atomic.Int64
	Commands                                                atomic.Int64 // sent to masters
	Virtual                                                 time.Duration
	Racing                                                  bool     // replies at their deadline raced the caller's timer
	FaultKinds                                              sync.Map // string -> *atomic.Int64
	Granted                                                 sync.Map // lock kind -> *atomic.Int64: grants
}

func (s *Stats) add(n *atomic.Int64) {
	if s != nil {
		n.Add(1)
	}
}

func (s *Stats) grant(kind OpKind) {
	s.Grants.Add(1)
	v, _ := s.Granted.LoadOrStore(kind.String(), new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (s *Stats) fault(kind string) {
	s.Faults.Add(1)
	v, _ := s.FaultKinds.LoadOrStore(kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// Ops returns the completed lock operations.
func (s *Stats) Ops() int64 { return s.Acquires.Load() + s.Extends.Load() + s.Releases.Load() }

func (s *Stats) String() string {
	var kinds []string
	s.FaultKinds.Range(func(k, v any) bool {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	sort.Strings(kinds)
	var granted []string
	s.Granted.Range(func(k, v any) bool {
		granted = append(granted, fmt.Sprintf("%s=%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	sort.Strings(granted)
	racing := ""
	if s.Racing {
		racing = " (racing)"
	}
	return fmt.Sprintf("virtual %v%s, %d commands, ops=%d acquire=%d (granted %d [%s]) extend=%d (extended %d) release=%d (released %d) leader reads=%d faults=%d [%s]",
		s.Virtual.Round(time.Millisecond), racing, s.Commands.Load(), s.Ops(), s.Acquires.Load(), s.Grants.Load(), strings.Join(granted, " "),
		s.Extends.Load(), s.Extended.Load(), s.Releases.Load(), s.Released.Load(), s.Leaders.Load(),
		s.Faults.Load(), strings.Join(kinds, " "))
}

// A Violation is a broken invariant, with the seed that reproduces it and
// the history of the key it concerns.
type Violation struct {
	Seed    uint64
	At      time.Duration // virtual time since the run began
	What    string
	History []string
	// Script is what the run did: the operations and faults drawn
	// from its seed (or its Config.Script). Shrinking replays parts.
	Script *Script
	// Racing: the run's replies at their deadline raced the library's
	// timers (see wire), so that a replay may take other turns.
	Racing bool
}

func (v *Violation) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sim: seed %d: at %v: %s", v.Seed, v.At, v.What)
	if len(v.History) > 0 {
		b.WriteString("\nhistory of the key (virtual time, event):\n  ")
		b.WriteString(strings.Join(v.History, "\n  "))
	}
	fmt.Fprintf(&b, "\nreplay: make sim SEED=%d", v.Seed)
	if v.Racing {
		b.WriteString(" (a racing run: the scheduler picks the winner of each reply that comes at its deadline, so a replay may take other turns)")
	}
	return b.String()
}

// The lock settings of the simulation.
const (
	timeout   = 50 * time.Millisecond // per master
	maxTTL    = 2 * time.Second
	callLimit = 2 * time.Second // each call's ctx
	maxWait   = 300 * time.Millisecond
	think     = 100 * time.Millisecond // a worker's pause between locks, drawn from [0, think)

	reentrantTTL = 500 * time.Millisecond
	// slack is how long past its ctx's end a call may return: the
	// virtual clock moves only when every goroutine waits, so a call
	// that honours its ctx returns at the deadline itself.
	slack = time.Millisecond
)

var ttls = []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second, maxTTL}

// Run runs one simulation. It must be called inside a synctest bubble
// (synctest.Test): the clock is virtual. It returns the run's counts and
// the first violation found (nil when none).
func Run(cfg Config) (*Stats, error) {
	r := newRun(cfg)
	return r.stats, r.run()
}

type run struct {
	cfg     Config
	stats   *Stats
	begin   time.Time
	masters []*Master
	clients []*redlock.Client
	wire    *wire // the network's deliveries, in a seeded order

	mu        sync.Mutex
	violation *Violation
	holders   map[string][]*holder
	permits   map[string][]*holder // by semaphore: its permits that may be valid
	fences    map[string]uint64
	tokens    map[string]bool // the token of every lock granted
	calmSince []time.Time     // per master: when its last fault ended
	disturbed []int           // per master: faults lasting now
	history   map[string][]string
	drawn     []OpSpec    // the operations drawn so far, in start order
	faulted   []FaultSpec // the faults drawn so far
	done      atomic.Bool
	pending   sync.WaitGroup // faults' ends still to come
}

type holder struct {
	l      *redlock.Lock
	id     string // the token of a plain lock, a reentrant lock's owner
	who    string
	from   time.Time
	shared bool   // a read hold: other read holds may be valid beside it
	value  string // a leader's value
	term   uint64 // a leader's term
}

func newRun(cfg Config) *run {
	if cfg.Masters == 0 {
		cfg.Masters = []int{3, 5}[cfg.Seed%2]
	}
	cfg.Clients = max(cfg.Clients, 1)
	cfg.Workers = max(cfg.Workers, 1)
	cfg.Keys = max(cfg.Keys, 1)
	return &run{cfg: cfg, stats: &Stats{}, holders: map[string][]*holder{}, permits: map[string][]*holder{}, fences: map[string]uint64{}, tokens: map[string]bool{},
		history: map[string][]string{}}
}

func (r *run) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(r.cfg.Seed, stream))
}

func (r *run) run() error {
	r.begin = time.Now()
	// One run in two lets replies at their deadline race the library's
	// timers (see wire).
	r.stats.Racing = r.rng(3).IntN(2) == 0
	r.wire = newWire(r.stats.Racing)
	defer r.wire.close()
	setup := r.rng(1)
	for i := range r.cfg.Masters {
		m := NewMaster(fmt.Sprintf("sim-master-%d", i), r.rng(100+uint64(i)), setup.IntN(2) == 0)
		m.reorder = r.cfg.Reorder
		m.Serve()
		m.SetWeather(calmWeather())
		if r.cfg.Faults {
			m.SetRate(1 + (setup.Float64()*2-1)*maxRateError)
		}
		r.masters = append(r.masters, m)
		r.disturbed = append(r.disturbed, 0)
		r.calmSince = append(r.calmSince, time.Now())
		if r.cfg.Trace {
			m.trace = func(key string, args []string, reply any, err error) {
				r.note(key, "  master %d: %s -> %s", i, traceArgs(args), traceReply(reply, err))
			}
		}
		m.onLateSet = func(key, token string) {
			r.fail(key, "master %d set %.8s after its release or rollback had run there, on the same connection", i, token)
		}
		m.onGrant = func(key, token string, ttl time.Duration) {
			at := time.Now()
			h := fnv.New64a()
			fmt.Fprintf(h, "%d %s %s", i, key, token)
			r.wire.after(ttl*9/10, h.Sum64(), false, func() { r.checkStale(i, key, token, at) })
		}
	}
	for c := range r.cfg.Clients {
		ordered := setup.IntN(2) == 0
		ts := make([]transport.Transport, len(r.masters))
		for i, m := range r.masters {
			lk := NewLink(m, ordered, r.rng(1000+uint64(c*64+i)), r.stats)
			lk.w = r.wire
			ts[i] = lk
		}
		// The client's jitter (backoff, wake-up spread, tokens) draws
		// from the seed too, per virtual instant as the links do.
		jit := testhook.WithJitter.(func(rand.Source) redlock.Option)(&instantSource{seed: r.rng(2000 + uint64(c)).Uint64()})
		cl, err := redlock.NewWithTransports(ts, redlock.WithTimeout(timeout), jit)
		if err != nil {
			return err
		}
		r.clients = append(r.clients, cl)
	}
	faultsDone := make(chan struct{})
	stopFaults := make(chan struct{})
	go func() {
		defer close(faultsDone)
		if r.cfg.Faults {
			r.faults(stopFaults)
		}
	}()
	var wg sync.WaitGroup
	for c, cl := range r.clients {
		owners := map[string]map[string]*redlock.Reentrant{}
		els := map[string]*election.Election{}
		for k := range elections {
			key := fmt.Sprintf("e%d", k)
			e, err := election.New(cl, key, election.WithTTL(electionTTL),
				election.WithBackoff(2*time.Millisecond, 50*time.Millisecond)) // the workers' backoff
			if err != nil {
				return err
			}
			els[key] = e
		}
		for w := range r.cfg.Workers {
			owner := fmt.Sprintf("c%d/o%d", c, w/2)
			if owners[owner] == nil {
				owners[owner] = map[string]*redlock.Reentrant{}
				for k := range max(r.cfg.Keys/2, 1) {
					key := fmt.Sprintf("r%d", k)
					re, err := cl.NewReentrant(key, owner, redlock.WithTTL(reentrantTTL),
						redlock.WithWait(maxWait), backoff)
					if err != nil {
						return err
					}
					owners[owner][key] = re
				}
			}
			wk := &worker{index: c*r.cfg.Workers + w, who: fmt.Sprintf("c%d/w%d", c, w), owner: owner, cl: cl,
				reentrant: owners[owner], elections: els}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.work(wk)
			}()
		}
	}
	wg.Wait()
	if r.cfg.Script != nil {
		// Let the last operations' keys reach their stale checks.
		time.Sleep(maxTTL)
	}
	close(stopFaults)
	<-faultsDone
	r.pending.Wait()
	for _, m := range r.masters {
		m.Resume()
		if !m.Up() {
			m.Restart()
		}
	}
	for _, cl := range r.clients {
		cl.Close()
	}
	for _, m := range r.masters {
		m.Stop()
	}
	r.stats.Virtual = time.Since(r.begin)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.violation != nil {
		r.violation.Script = r.cfg.Script
		if r.violation.Script == nil {
			r.violation.Script = &Script{Ops: append([]OpSpec(nil), r.drawn...), Faults: append([]FaultSpec(nil), r.faulted...)}
		}
		r.violation.Racing = r.stats.Racing
		return r.violation
	}
	return nil
}

// instantSource is a client's jitter source (the library serialises its
// draws): each draw is seeded from the source's seed, the virtual instant
// and how many draws came before it at that instant, so that a replay
// whose schedule drifted somewhere still draws the same at the instants
// it did not drift, instead of every later draw shifting by one (as
// Link.drawLocked does for the links).
type instantSource struct {
	seed uint64
	at   time.Time
	n    uint64
	pcg  rand.PCG
}

func (s *instantSource) Uint64() uint64 {
	now := time.Now()
	if !now.Equal(s.at) {
		s.at, s.n = now, 0
	}
	s.n++
	s.pcg.Seed(s.seed^uint64(now.UnixNano()), s.n)
	return s.pcg.Uint64()
}

func (r *run) stopping() bool {
	if r.done.Load() || (r.cfg.Stop != nil && r.cfg.Stop.Load()) {
		return true
	}
	return r.cfg.Script == nil && r.stats.Ops() >= int64(r.cfg.Ops)
}

// call runs f with a ctx bounded by callLimit and checks that it returns
// within it.
func (r *run) call(key, who string, f func(ctx context.Context)) {
	ctx, cancel := context.WithTimeout(context.Background(), callLimit)
	defer cancel()
	start := time.Now()
	f(ctx)
	if d := time.Since(start); d > callLimit+slack {
		r.fail(key, "%s: a call took %v, past its ctx's %v", who, d, callLimit)
	}
}

func short(err error) string {
	if err == nil {
		return "ok"
	}
	s := err.Error()
	if i := strings.IndexByte(s, ':'); i > 0 {
		if j := strings.IndexByte(s[i+1:], ':'); j > 0 && len(s) > 120 {
			return s[:i+1+j]
		}
	}
	return s
}

func (r *run) since(t time.Time) time.Duration { return t.Sub(r.begin) }

func (r *run) note(key, format string, args ...any) {
	r.mu.Lock()
	r.noteLocked(key, format, args...)
	r.mu.Unlock()
}

// keep is how many events of a key's history a failure prints.
func (r *run) keep() int {
	if r.cfg.Trace {
		return 400
	}
	return 30
}

func (r *run) noteLocked(key, format string, args ...any) {
	h := r.history[key]
	h = append(h, fmt.Sprintf("%12v %s", r.since(time.Now()), fmt.Sprintf(format, args...)))
	if keep := r.keep(); len(h) > keep*2 {
		h = h[len(h)-keep:]
	}
	r.history[key] = h
}

func (r *run) fail(key, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failLocked(key, format, args...)
}

func (r *run) failLocked(key, format string, args ...any) {
	if r.violation != nil {
		return
	}
	what := fmt.Sprintf("key %s: ", key) + fmt.Sprintf(format, args...)
	r.noteLocked(key, "VIOLATION: %s", what)
	h := r.history[key]
	if keep := r.keep(); len(h) > keep {
		h = h[len(h)-keep:]
	}
	r.violation = &Violation{Seed: r.cfg.Seed, At: r.since(time.Now()), What: what, History: append([]string(nil), h...)}
	r.done.Store(true)
}

// notes adds an event to the history of each of keys.
func (r *run) notes(keys []string, format string, args ...any) {
	r.mu.Lock()
	for _, k := range keys {
		r.noteLocked(k, format, args...)
	}
	r.mu.Unlock()
}

// granted records a new holder of keys and checks that no other holder
// of them is valid now (a read hold beside other read holds excepted).
// fenced: its fencing token (an election's term) must be above every
// earlier one of the key.
func (r *run) granted(keys []string, h *holder, fenced bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	h.from = now
	r.tokens[h.l.Token()] = true
	for _, key := range keys {
		r.noteLocked(key, "%s granted %.8s until %v fence %d%s", h.who, h.id, r.since(h.l.Until()), h.l.Fence(),
			map[bool]string{true: " (read)"}[h.shared])
		r.checkLocked(key, h, now)
		if fenced {
			f := h.l.Fence()
			if f <= r.fences[key] {
				r.failLocked(key, "%s got fence %d, not above %d granted before", h.who, f, r.fences[key])
			}
			r.fences[key] = max(r.fences[key], f)
		}
		r.holders[key] = append(r.holders[key], h)
	}
}

func (r *run) extended(keys []string, h *holder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, key := range keys {
		r.noteLocked(key, "%s extended %.8s until %v", h.who, h.id, r.since(h.l.Until()))
		r.checkLocked(key, h, time.Now())
	}
}

// checkLocked fails when h is valid at now beside another holder's valid
// lock of key (unless both are read holds).
func (r *run) checkLocked(key string, n *holder, now time.Time) {
	if !n.l.Until().After(now) {
		return
	}
	live := r.holders[key][:0]
	for _, h := range r.holders[key] {
		u := h.l.Until()
		if !u.After(now) {
			continue // no longer valid: forget it
		}
		live = append(live, h)
		if h.id != n.id && (!h.shared || !n.shared) {
			r.failLocked(key, "two valid holders: %s (%.8s, until %v) and %s (%.8s, until %v)",
				h.who, h.id, r.since(u), n.who, n.id, r.since(n.l.Until()))
		}
	}
	r.holders[key] = live
}

// permitted records h, granted or extended slot of semaphore sem, and
// fails when more than semPermits of the semaphore's permits are valid
// now.
func (r *run) permitted(sem string, slot int, h *holder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.noteLocked(sem, "%s holds slot %d (%.8s) until %v", h.who, slot, h.id, r.since(h.l.Until()))
	live := r.permits[sem][:0]
	found := false
	for _, x := range r.permits[sem] {
		if x.l.Until().After(now) {
			live = append(live, x)
			found = found || x == h
		}
	}
	if !found && h.l.Until().After(now) {
		live = append(live, h)
	}
	r.permits[sem] = live
	if len(live) > semPermits {
		var who []string
		for _, x := range live {
			who = append(who, fmt.Sprintf("%s (%s, until %v)", x.who, x.l.Key(), r.since(x.l.Until())))
		}
		r.failLocked(sem, "%d valid permits of a semaphore of %d: %s", len(live), semPermits, strings.Join(who, ", "))
	}
}

var scriptNames = func() map[string]string {
	m := map[string]string{}
	for _, s := range transport.Scripts() {
		m[s.SHA()] = s.Name()
	}
	return m
}()

func traceArgs(a []string) string {
	out := make([]string, 0, len(a))
	for i, s := range a {
		switch {
		case i == 1 && a[0] == "EVALSHA":
			s = scriptNames[s]
		case i == 1 && a[0] == "EVAL":
			s = "(source)"
		case len(s) > 8:
			s = s[:8]
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func traceReply(v any, err error) string {
	if err != nil {
		return err.Error()
	}
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(v)
}

// disturb and calm bracket a fault of master i.
func (r *run) disturb(i int) {
	r.mu.Lock()
	r.disturbed[i]++
	r.mu.Unlock()
}

func (r *run) calm(i int) {
	r.mu.Lock()
	if r.disturbed[i]--; r.disturbed[i] == 0 {
		r.calmSince[i] = time.Now()
	}
	r.mu.Unlock()
}

// checkStale runs shortly before a key that master i set at for token
// would expire there: if the key still holds the token, and no lock was
// granted with it, the attempt failed and its rollback never reached
// the master — which cannot be when the master and its network were calm
// all along (no freeze, crash or weather since a little before at).
func (r *run) checkStale(i int, key, token string, at time.Time) {
	if r.stopping() {
		return
	}
	v, _ := r.masters[i].Exec("GET", key)
	if b, ok := v.([]byte); !ok || string(b) != token {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tokens[token] || r.disturbed[i] > 0 || r.calmSince[i].After(at.Add(-2*timeout)) {
		return
	}
	r.failLocked(key, "a failed attempt's key (%.8s) stayed on calm master %d from %v until now: its rollback never ran",
		token, i, r.since(at))
}

// A FaultSpec is one fault of a run, every choice in it drawn.
type FaultSpec struct {
	At     time.Duration // virtual time since the run began
	Master int
	Kind   FaultKind
	For    time.Duration // a freeze's, a crash's, weather's length
	W      weather
	Rate   float64
	Jump   time.Duration
}

// FaultKind is the kind of a fault.
type FaultKind uint8

// The faults of a run.
const (
	FaultNone FaultKind = iota
	FaultFreeze
	FaultCrash
	FaultWeather
	FaultRate
	FaultJumpBack
	FaultJumpForward
)

var faultNames = [...]string{"none", "freeze", "crash", "weather", "clock-rate", "clock-jump-back", "clock-jump-forward"}

func (k FaultKind) String() string { return faultNames[k] }

func (f FaultSpec) String() string {
	s := fmt.Sprintf("%8v master %d %s", f.At.Round(time.Microsecond), f.Master, f.Kind)
	switch f.Kind {
	case FaultFreeze, FaultCrash:
		s += fmt.Sprintf(" for %v", f.For.Round(time.Millisecond))
	case FaultWeather:
		s += fmt.Sprintf(" for %v %+v", f.For.Round(time.Millisecond), f.W)
	case FaultRate:
		s += fmt.Sprintf(" %.4f", f.Rate)
	case FaultJumpBack, FaultJumpForward:
		s += fmt.Sprintf(" %v", f.Jump)
	}
	return s
}

// calmWeather is a master's network without a fault: a reply now and
// then comes at its command's deadline (that is no fault, and it makes
// a reply and the caller's timer race at one virtual instant).
func calmWeather() weather {
	return weather{AtDeadline: 0.01, AtDeadlineSet: 0.2, DupComplete: dupComplete}
}

// drawFault draws the fault after one at from.
func (r *run) drawFault(rng *rand.Rand, from time.Duration) FaultSpec {
	f := FaultSpec{At: from + time.Duration(rng.Int64N(int64(faultEvery))), Master: rng.IntN(len(r.masters))}
	switch k := rng.IntN(10); k {
	case 0, 1: // a freeze, often longer than the per-master timeout
		f.Kind = FaultFreeze
		f.For = time.Duration(rng.Int64N(int64([]time.Duration{100 * time.Millisecond, 3 * time.Second}[rng.IntN(2)])))
	case 2: // a crash; an everysec master stays down for longer than any TTL
		f.Kind = FaultCrash
		f.For = time.Duration(rng.Int64N(int64(2 * time.Second)))
		if r.masters[f.Master].everysec {
			f.For += maxTTL + 100*time.Millisecond
		}
	case 3, 4, 5: // weather: delays, lost requests and replies, late replies
		f.Kind = FaultWeather
		f.W = weather{Delay: []time.Duration{0, time.Millisecond, 10 * time.Millisecond, 40 * time.Millisecond}[rng.IntN(4)]}
		if rng.IntN(2) == 0 {
			f.W.DropReq = []float64{0, 0.02, 0.1}[rng.IntN(3)]
			f.W.DropReply = []float64{0, 0.02, 0.1}[rng.IntN(3)]
			f.W.LateReply = []float64{0, 0.02, 0.1}[rng.IntN(3)]
		}
		f.W.AtDeadline = []float64{0.01, 0.1, 0.5}[rng.IntN(3)]
		f.W.AtDeadlineSet = max(f.W.AtDeadline, 0.2)
		f.W.DupComplete = dupComplete
		f.For = time.Duration(rng.Int64N(int64(2 * time.Second)))
	case 6: // the master's clock runs at another rate, within the drift allowance
		f.Kind = FaultRate
		f.Rate = 1 + (rng.Float64()*2-1)*maxRateError
	case 7: // a clock jump: back by up to a second, or forward within the allowance
		if rng.IntN(2) == 0 {
			f.Kind, f.Jump = FaultJumpBack, -time.Duration(rng.Int64N(int64(time.Second)))
		} else {
			f.Kind, f.Jump = FaultJumpForward, time.Duration(rng.Int64N(int64(maxJump)))
		}
	}
	return f
}

// faults plays the fault schedule, drawn from the seed or the script's,
// until stop.
func (r *run) faults(stop <-chan struct{}) {
	rng := r.rng(2)
	lastJump := make([]time.Time, len(r.masters))
	var at time.Duration
	for i := 0; ; i++ {
		var f FaultSpec
		if r.cfg.Script != nil {
			if i == len(r.cfg.Script.Faults) {
				<-stop
				return
			}
			f = r.cfg.Script.Faults[i]
		} else {
			f = r.drawFault(rng, at)
			at = f.At
			if f.Kind == FaultNone {
				continue
			}
			r.mu.Lock()
			r.faulted = append(r.faulted, f)
			r.mu.Unlock()
		}
		t := time.NewTimer(time.Until(r.begin.Add(f.At)))
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
		r.play(f, stop, lastJump)
	}
}

// play puts fault f on its master.
func (r *run) play(f FaultSpec, stop <-chan struct{}, lastJump []time.Time) {
	i := f.Master
	m := r.masters[i]
	switch f.Kind {
	case FaultFreeze:
		if !m.Up() {
			return
		}
		r.stats.fault("freeze")
		r.disturb(i)
		m.Freeze()
		r.after(stop, f.For, func() { m.Resume(); r.calm(i) })
	case FaultCrash:
		if !m.Up() {
			return
		}
		r.stats.fault("crash")
		r.disturb(i)
		m.Crash()
		r.after(stop, f.For, func() {
			defer r.calm(i)
			if m.Restart() {
				// Fencing counters must survive restarts
				// (docs/safety.md): after a master forgot its
				// last writes, tokens are compared afresh.
				r.stats.fault("restart-lost-writes")
				r.mu.Lock()
				clear(r.fences)
				r.mu.Unlock()
			}
		})
	case FaultWeather:
		r.stats.fault("weather")
		r.disturb(i)
		m.SetWeather(f.W)
		r.after(stop, f.For, func() {
			m.SetWeather(calmWeather())
			r.calm(i)
		})
	case FaultRate:
		r.stats.fault("clock-rate")
		m.SetRate(f.Rate)
	case FaultJumpBack:
		r.stats.fault("clock-jump-back")
		m.Jump(f.Jump)
	case FaultJumpForward:
		if time.Since(lastJump[i]) > 2*maxTTL {
			lastJump[i] = time.Now()
			r.stats.fault("clock-jump-forward")
			m.Jump(f.Jump)
		}
	}
}

// Within the drift allowance (1 % of the TTL plus 2 ms): a master's rate
// may be off by maxRateError and its clock may jump forward by maxJump at
// most once per two TTLs; together they stay under the allowance.
const (
	faultEvery   = time.Second // faults come at intervals drawn from [0, faultEvery)
	maxRateError = 0.007
	maxJump      = 3 * time.Millisecond
)

// dupComplete is the share of commands the transport completes twice
// (a transport fault that breaks the Transport contract; 0 in the
// simulation, raised by a mutant).
const dupComplete = 0.0

// after runs f after d, or at once when stop closes first.
func (r *run) after(stop <-chan struct{}, d time.Duration, f func()) {
	r.pending.Add(1)
	go func() {
		defer r.pending.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-stop:
		case <-t.C:
		}
		f()
	}()
}
