// Package sim is a deterministic-schedule simulator of a quorumlock
// quorum: N simulated masters that run the library's own Lua scripts
// (gopher-lua over an in-memory keyspace), reached through the public
// transport seam (redlock.Transport), with faults drawn from a seed,
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
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
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
	// Stop, when set, ends the run early (a wall-clock budget).
	Stop *atomic.Bool
}

// Stats counts what a run did.
type Stats struct {
	Acquires, Grants, Extends, Extended, Releases, Released atomic.Int64
	Faults                                                  atomic.Int64
	DupCompletions                                          atomic.Int64
	Commands                                                atomic.Int64 // sent to masters
	Virtual                                                 time.Duration
	FaultKinds                                              sync.Map // string -> *atomic.Int64
}

func (s *Stats) add(n *atomic.Int64) {
	if s != nil {
		n.Add(1)
	}
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
	return fmt.Sprintf("virtual %v, %d commands, ops=%d acquire=%d (granted %d) extend=%d (extended %d) release=%d (released %d) faults=%d [%s]",
		s.Virtual.Round(time.Millisecond), s.Commands.Load(), s.Ops(), s.Acquires.Load(), s.Grants.Load(), s.Extends.Load(), s.Extended.Load(), s.Releases.Load(), s.Released.Load(),
		s.Faults.Load(), strings.Join(kinds, " "))
}

// A Violation is a broken invariant, with the seed that reproduces it and
// the history of the key it concerns.
type Violation struct {
	Seed    uint64
	At      time.Duration // virtual time since the run began
	What    string
	History []string
}

func (v *Violation) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sim: seed %d: at %v: %s", v.Seed, v.At, v.What)
	if len(v.History) > 0 {
		b.WriteString("\nhistory of the key (virtual time, event):\n  ")
		b.WriteString(strings.Join(v.History, "\n  "))
	}
	fmt.Fprintf(&b, "\nreplay: make sim SEED=%d", v.Seed)
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

	mu        sync.Mutex
	violation *Violation
	holders   map[string][]*holder
	fences    map[string]uint64
	tokens    map[string]bool // the token of every lock granted
	calmSince []time.Time     // per master: when its last fault ended
	disturbed []int           // per master: faults lasting now
	history   map[string][]string
	done      atomic.Bool
	pending   sync.WaitGroup // faults' ends still to come
}

type holder struct {
	l    *redlock.Lock
	id   string // the token of a plain lock, a reentrant lock's owner
	who  string
	from time.Time
}

func newRun(cfg Config) *run {
	if cfg.Masters == 0 {
		cfg.Masters = []int{3, 5}[cfg.Seed%2]
	}
	cfg.Clients = max(cfg.Clients, 1)
	cfg.Workers = max(cfg.Workers, 1)
	cfg.Keys = max(cfg.Keys, 1)
	return &run{cfg: cfg, stats: &Stats{}, holders: map[string][]*holder{}, fences: map[string]uint64{}, tokens: map[string]bool{},
		history: map[string][]string{}}
}

func (r *run) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(r.cfg.Seed, stream))
}

func (r *run) run() error {
	r.begin = time.Now()
	setup := r.rng(1)
	for i := range r.cfg.Masters {
		m := NewMaster(fmt.Sprintf("sim-master-%d", i), r.rng(100+uint64(i)), setup.IntN(2) == 0)
		m.reorder = r.cfg.Reorder
		m.Serve()
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
		m.onGrant = func(key, token string, ttl time.Duration) {
			at := time.Now()
			time.AfterFunc(ttl*9/10, func() { r.checkStale(i, key, token, at) })
		}
	}
	for c := range r.cfg.Clients {
		ordered := setup.IntN(2) == 0
		ts := make([]redlock.Transport, len(r.masters))
		for i, m := range r.masters {
			ts[i] = NewLink(m, ordered, r.rng(1000+uint64(c*64+i)), r.stats)
		}
		cl, err := redlock.NewWithTransports(ts, redlock.WithTimeout(timeout))
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
		for w := range r.cfg.Workers {
			owner := fmt.Sprintf("c%d/o%d", c, w/2)
			if owners[owner] == nil {
				owners[owner] = map[string]*redlock.Reentrant{}
				for k := range max(r.cfg.Keys/2, 1) {
					key := fmt.Sprintf("r%d", k)
					re, err := cl.NewReentrant(key, owner, redlock.WithTTL(reentrantTTL),
						redlock.WithWait(maxWait), redlock.WithBackoff(2*time.Millisecond, 50*time.Millisecond))
					if err != nil {
						return err
					}
					owners[owner][key] = re
				}
			}
			locks := owners[owner]
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.worker(cl, fmt.Sprintf("c%d/w%d", c, w), owner, locks, r.rng(10000+uint64(c*64+w)))
			}()
		}
	}
	wg.Wait()
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
		return r.violation
	}
	return nil
}

func (r *run) stopping() bool {
	return r.done.Load() || r.stats.Ops() >= int64(r.cfg.Ops) || (r.cfg.Stop != nil && r.cfg.Stop.Load())
}

// worker takes locks on random keys until the run ends: plain locks
// (an Acquire or a TryAcquire, some fenced, then a few Extends with
// pauses between, then a Release — or nothing, leaving the lock to
// expire) and reentrant ones (owners shared by two workers of a client).
func (r *run) worker(cl *redlock.Client, who string, owner string, reentrant map[string]*redlock.Reentrant, rng *rand.Rand) {
	for !r.stopping() {
		time.Sleep(time.Duration(rng.Int64N(int64(think))))
		if rng.IntN(4) == 0 {
			r.reentrantOnce(who, owner, reentrant, rng)
		} else {
			r.plainOnce(cl, who, rng)
		}
	}
}

func (r *run) plainOnce(cl *redlock.Client, who string, rng *rand.Rand) {
	key := fmt.Sprintf("k%d", rng.IntN(r.cfg.Keys))
	ttl := ttls[rng.IntN(len(ttls))]
	opts := []redlock.LockOption{redlock.WithTTL(ttl), redlock.WithBackoff(2*time.Millisecond, 50*time.Millisecond)}
	fenced := rng.IntN(3) == 0
	if fenced {
		opts = append(opts, redlock.WithFencing())
	}
	try := rng.IntN(2) == 0
	var l *redlock.Lock
	var err error
	r.call(key, who, func(ctx context.Context) {
		if try {
			l, err = cl.TryAcquire(ctx, key, opts...)
		} else {
			l, err = cl.Acquire(ctx, key, append(opts, redlock.WithWait(time.Duration(rng.Int64N(int64(maxWait)))))...)
		}
	})
	r.stats.Acquires.Add(1)
	if err != nil {
		r.note(key, "%s acquire failed: %v", who, short(err))
		return
	}
	r.stats.Grants.Add(1)
	id := l.Token()
	r.granted(key, who, id, l, fenced)
	for n := rng.IntN(4); n > 0 && !r.stopping(); n-- {
		time.Sleep(time.Duration(rng.Int64N(int64(ttl / 3))))
		ttl = ttls[rng.IntN(len(ttls))] // shorter or longer
		r.call(key, who, func(ctx context.Context) { err = l.Extend(ctx, ttl) })
		r.stats.Extends.Add(1)
		if err != nil {
			r.note(key, "%s extend to %v failed: %v (until %v)", who, ttl, short(err), r.since(l.Until()))
			break
		}
		r.stats.Extended.Add(1)
		r.extended(key, who, id, l)
	}
	if rng.IntN(4) == 0 {
		r.note(key, "%s abandons its lock", who)
		return
	}
	r.call(key, who, func(ctx context.Context) { err = l.Release(ctx) })
	r.stats.Releases.Add(1)
	if err == nil {
		r.stats.Released.Add(1)
	}
	r.note(key, "%s released: %v (until %v)", who, short(err), r.since(l.Until()))
	if u := l.Until(); u.After(time.Now()) {
		r.fail(key, "%s: Until %v after Release returned", who, r.since(u))
	}
}

// reentrantOnce takes a reentrant lock of owner (shared with another
// worker, which may hold it: then this is a second hold), holds it a
// while, and gives the hold back.
func (r *run) reentrantOnce(who, owner string, locks map[string]*redlock.Reentrant, rng *rand.Rand) {
	key := fmt.Sprintf("r%d", rng.IntN(max(r.cfg.Keys/2, 1)))
	re := locks[key]
	var err error
	r.call(key, who, func(ctx context.Context) {
		if rng.IntN(2) == 0 {
			err = re.TryAcquire(ctx)
		} else {
			err = re.Acquire(ctx)
		}
	})
	r.stats.Acquires.Add(1)
	if err != nil {
		r.note(key, "%s (%s) acquire failed: %v", who, owner, short(err))
		return
	}
	r.stats.Grants.Add(1)
	l := re.Lock()
	if l == nil {
		r.fail(key, "%s (%s): Acquire succeeded, no lock held", who, owner)
		return
	}
	r.granted(key, who, owner, l, false)
	time.Sleep(time.Duration(rng.Int64N(int64(reentrantTTL / 3))))
	r.call(key, who, func(ctx context.Context) { err = re.Release(ctx) })
	r.stats.Releases.Add(1)
	if err == nil {
		r.stats.Released.Add(1)
	}
	r.note(key, "%s (%s) released a hold: %v (count %d, until %v)", who, owner, short(err), re.Count(), r.since(l.Until()))
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

// granted records a new holder of key and checks that no other holder is
// valid now.
func (r *run) granted(key, who, id string, l *redlock.Lock, fenced bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.tokens[l.Token()] = true
	r.noteLocked(key, "%s granted %.8s until %v fence %d", who, id, r.since(l.Until()), l.Fence())
	r.checkLocked(key, who, id, l, now)
	if fenced {
		f := l.Fence()
		if f <= r.fences[key] {
			r.failLocked(key, "%s got fence %d, not above %d granted before", who, f, r.fences[key])
		}
		r.fences[key] = max(r.fences[key], f)
	}
	r.holders[key] = append(r.holders[key], &holder{l: l, id: id, who: who, from: now})
}

func (r *run) extended(key, who, id string, l *redlock.Lock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noteLocked(key, "%s extended %.8s until %v", who, id, r.since(l.Until()))
	r.checkLocked(key, who, id, l, time.Now())
}

// checkLocked fails when l, of holder id, is valid at now beside another
// holder's valid lock.
func (r *run) checkLocked(key, who, id string, l *redlock.Lock, now time.Time) {
	if !l.Until().After(now) {
		return
	}
	live := r.holders[key][:0]
	for _, h := range r.holders[key] {
		u := h.l.Until()
		if !u.After(now) {
			continue // no longer valid: forget it
		}
		live = append(live, h)
		if h.id != id {
			r.failLocked(key, "two valid holders: %s (%.8s, until %v) and %s (%.8s, until %v)",
				h.who, h.id, r.since(u), who, id, r.since(l.Until()))
		}
	}
	r.holders[key] = live
}

var scriptNames = func() map[string]string {
	m := map[string]string{}
	for _, s := range redlock.Scripts() {
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

// faults plays the fault schedule drawn from the seed until stop.
func (r *run) faults(stop <-chan struct{}) {
	rng := r.rng(2)
	n := len(r.masters)
	lastJump := make([]time.Time, n)
	for {
		t := time.NewTimer(time.Duration(rng.Int64N(int64(faultEvery))))
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
		i := rng.IntN(n)
		m := r.masters[i]
		switch k := rng.IntN(10); k {
		case 0, 1: // a freeze, often longer than the per-master timeout
			d := time.Duration(rng.Int64N(int64([]time.Duration{100 * time.Millisecond, 3 * time.Second}[rng.IntN(2)])))
			if !m.Up() {
				continue
			}
			r.stats.fault("freeze")
			r.disturb(i)
			m.Freeze()
			r.after(stop, d, func() { m.Resume(); r.calm(i) })
		case 2: // a crash; an everysec master stays down for longer than any TTL
			if !m.Up() {
				continue
			}
			d := time.Duration(rng.Int64N(int64(2 * time.Second)))
			if m.everysec {
				d += maxTTL + 100*time.Millisecond
			}
			r.stats.fault("crash")
			r.disturb(i)
			m.Crash()
			r.after(stop, d, func() {
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
		case 3, 4, 5: // weather: delays, lost requests and replies, late replies
			w := weather{delay: []time.Duration{0, time.Millisecond, 10 * time.Millisecond, 40 * time.Millisecond}[rng.IntN(4)]}
			if rng.IntN(2) == 0 {
				w.dropReq = []float64{0, 0.02, 0.1}[rng.IntN(3)]
				w.dropReply = []float64{0, 0.02, 0.1}[rng.IntN(3)]
				w.lateReply = []float64{0, 0.02, 0.1}[rng.IntN(3)]
			}
			w.dupComplete = dupComplete
			r.stats.fault("weather")
			r.disturb(i)
			m.SetWeather(w)
			r.after(stop, time.Duration(rng.Int64N(int64(2*time.Second))), func() {
				m.SetWeather(weather{dupComplete: dupComplete})
				r.calm(i)
			})
		case 6: // the master's clock runs at another rate, within the drift allowance
			r.stats.fault("clock-rate")
			m.SetRate(1 + (rng.Float64()*2-1)*maxRateError)
		case 7: // a clock jump: back by up to a second, or forward within the allowance
			if rng.IntN(2) == 0 {
				r.stats.fault("clock-jump-back")
				m.Jump(-time.Duration(rng.Int64N(int64(time.Second))))
			} else if time.Since(lastJump[i]) > 2*maxTTL {
				lastJump[i] = time.Now()
				r.stats.fault("clock-jump-forward")
				m.Jump(time.Duration(rng.Int64N(int64(maxJump))))
			}
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
