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
	maxTTL    = time.Second
	callLimit = 2 * time.Second // each call's ctx
	maxWait   = 300 * time.Millisecond
	think     = 100 * time.Millisecond // a worker's pause between locks, drawn from [0, think)
	// slack is how long past its ctx's end a call may return: the
	// virtual clock moves only when every goroutine waits, so a call
	// that honours its ctx returns at the deadline itself.
	slack = time.Millisecond
)

var ttls = []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, maxTTL}

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
	history   map[string][]string
	done      atomic.Bool
	pending   sync.WaitGroup // faults' ends still to come
}

type holder struct {
	l    *redlock.Lock
	who  string
	tok  string
	from time.Time
}

func newRun(cfg Config) *run {
	if cfg.Masters == 0 {
		cfg.Masters = []int{3, 5}[cfg.Seed%2]
	}
	cfg.Clients = max(cfg.Clients, 1)
	cfg.Workers = max(cfg.Workers, 1)
	cfg.Keys = max(cfg.Keys, 1)
	return &run{cfg: cfg, stats: &Stats{}, holders: map[string][]*holder{}, fences: map[string]uint64{},
		history: map[string][]string{}}
}

func (r *run) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(r.cfg.Seed, stream))
}

func (r *run) run() error {
	r.begin = time.Now()
	setup := r.rng(1)
	for i := range r.cfg.Masters {
		r.masters = append(r.masters, NewMaster(fmt.Sprintf("sim-master-%d", i), r.rng(100+uint64(i)), setup.IntN(2) == 0))
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
		for w := range r.cfg.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.worker(cl, fmt.Sprintf("c%d/w%d", c, w), r.rng(10000+uint64(c*64+w)))
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

// worker takes locks on random keys until the run ends: an Acquire (or a
// TryAcquire), then a few Extends with pauses between, then a Release —
// or nothing, leaving the lock to expire.
func (r *run) worker(cl *redlock.Client, who string, rng *rand.Rand) {
	for !r.stopping() {
		time.Sleep(time.Duration(rng.Int64N(int64(think))))
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
			r.note(key, "%s acquire failed: %v", who, err)
			continue
		}
		r.stats.Grants.Add(1)
		r.granted(key, who, l, fenced)
		for n := rng.IntN(4); n > 0 && !r.stopping(); n-- {
			time.Sleep(time.Duration(rng.Int64N(int64(ttl / 3))))
			r.call(key, who, func(ctx context.Context) { err = l.Extend(ctx, ttl) })
			r.stats.Extends.Add(1)
			if err != nil {
				r.note(key, "%s extend failed: %v (until %v)", who, short(err), r.since(l.Until()))
				break
			}
			r.stats.Extended.Add(1)
			r.extended(key, who, l)
		}
		if rng.IntN(8) == 0 {
			r.note(key, "%s abandons its lock", who)
			continue
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

func (r *run) noteLocked(key, format string, args ...any) {
	h := append(r.history[key], fmt.Sprintf("%12v %s", r.since(time.Now()), fmt.Sprintf(format, args...)))
	if len(h) > 64 {
		h = h[len(h)-48:]
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
	if len(h) > 30 {
		h = h[len(h)-30:]
	}
	r.violation = &Violation{Seed: r.cfg.Seed, At: r.since(time.Now()), What: what, History: append([]string(nil), h...)}
	r.done.Store(true)
}

// granted records a new holder of key and checks that no other holder is
// valid now.
func (r *run) granted(key, who string, l *redlock.Lock, fenced bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.noteLocked(key, "%s granted %.8s until %v fence %d", who, l.Token(), r.since(l.Until()), l.Fence())
	r.checkLocked(key, who, l, now)
	if fenced {
		f := l.Fence()
		if f <= r.fences[key] {
			r.failLocked(key, "%s got fence %d, not above %d granted before", who, f, r.fences[key])
		}
		r.fences[key] = max(r.fences[key], f)
	}
	r.holders[key] = append(r.holders[key], &holder{l: l, who: who, tok: l.Token(), from: now})
}

func (r *run) extended(key, who string, l *redlock.Lock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noteLocked(key, "%s extended %.8s until %v", who, l.Token(), r.since(l.Until()))
	r.checkLocked(key, who, l, time.Now())
}

// checkLocked fails when l is valid at now beside another valid holder.
func (r *run) checkLocked(key, who string, l *redlock.Lock, now time.Time) {
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
		if h.l != l {
			r.failLocked(key, "two valid holders: %s (%.8s, until %v) and %s (%.8s, until %v)",
				h.who, h.tok, r.since(u), who, l.Token(), r.since(l.Until()))
		}
	}
	r.holders[key] = live
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
			m.Freeze()
			r.after(stop, d, m.Resume)
		case 2: // a crash; an everysec master stays down for longer than any TTL
			if !m.Up() {
				continue
			}
			d := time.Duration(rng.Int64N(int64(2 * time.Second)))
			if m.everysec {
				d += maxTTL + 100*time.Millisecond
			}
			r.stats.fault("crash")
			m.Crash()
			r.after(stop, d, func() {
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
			m.SetWeather(w)
			r.after(stop, time.Duration(rng.Int64N(int64(2*time.Second))), func() { m.SetWeather(weather{dupComplete: dupComplete}) })
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
	maxRateError = 0.004
	maxJump      = 4 * time.Millisecond
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
