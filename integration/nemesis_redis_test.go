package integration_test

// Suite 5: safety under a nemesis. Clients contend for one key on N=5
// masters (AOF always) while a nemesis pauses, kills and restarts, and
// partitions random minorities, and (clock suites, soak) makes masters'
// clocks drift and jump. Every lock's validity window is recorded on this
// process's monotonic clock; inside each lock, an unprotected
// read-sleep-write increments a counter on a separate Redis, and a fenced
// write (fence.Store) records the holder's token there. Now and then a
// holder plays Kleppmann's paused client: it sleeps past its lock's
// validity, waits for a later holder's write, and then writes again with
// its old token.
//
// runNemesis does the run and counts; result.requireSafe asserts what the
// lock promises within its assumptions; the hazard suites assert the
// opposite (clock_test.go).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

var nemesisDuration = flag.Duration("nemesis", 30*time.Second,
	"how long the nemesis suite runs per backend (longer for a soak)")

type window struct {
	key, client int
	fence       uint64
	start, end  time.Time
}

// fencedWrite is one write through fence.Store.
type fencedWrite struct {
	key, client       int
	fence             uint64
	stale             bool      // written after the lock's validity
	until             time.Time // the lock's validity
	started, finished time.Time
	accepted          bool
}

// The nemesis's fault kinds.
const (
	faultPause     = "pause"
	faultKill      = "kill/restart"
	faultPartition = "partition"
	// Within the clock assumption (docs/safety.md, assumption 4): a rate
	// within ±0.5 % (the default drift factor is 1 %), a backward jump
	// (keys live longer: only liveness suffers), a forward jump of at most
	// 1 ms (ten of them within a 2 s TTL stay inside the allowance).
	faultClockRate = "clock rate ±0.5%"
	faultClockBack = "clock jump back ≤1s"
	faultClockFwd  = "clock jump forward ≤1ms"
	// Beyond it: a forward jump longer than the TTL.
	faultClockLeap = "clock jump forward > TTL"
)

type nemesisConfig struct {
	clients int
	// keys: the clients contend in keys groups (client i for key i%keys),
	// each with its own counter and fenced value; default 1.
	keys     int
	duration time.Duration
	kinds    []string // what the nemesis draws from, per victim
	ttl      time.Duration
	// fastMasters masters (the first ones) run at fastRate for the whole
	// run; 0 for none.
	fastMasters int
	fastRate    float64
	// leapFast makes the nemesis jump the fastMasters' clocks forward by
	// 1.5 × TTL at every step (faultClockLeap).
	leapFast bool
	// victims are the masters the nemesis draws its minorities from;
	// default all.
	victims []int
	// holdToExpiry makes every holder keep its lock until its validity
	// ends (then release it), so a master that lets the key go early is
	// seen; otherwise holders release once their work is done.
	holdToExpiry bool
	// staleEvery: one holder in staleEvery plays the paused client, on a
	// lock of staleTTL (defaults: 8, ttl/2). It keeps the key until that
	// TTL, so fewer of them, on shorter locks, make a run grant more.
	staleEvery int
	staleTTL   time.Duration
	// stopAfterOverlaps ends the run early once this many overlapping
	// windows were seen (0: never): the hazard suites need one.
	stopAfterOverlaps int
}

// nemesisResult is what a run counted.
type nemesisResult struct {
	label                                       string
	acquired, completed, skipped, overran, fail int64
	counter                                     int64
	faults                                      map[string]int
	windows                                     []window
	writes                                      []fencedWrite
	elapsed                                     time.Duration

	// overrunIsLoad: a critical section that ends after its validity is
	// the holder's own pause (assumption 5: a starved goroutine on a busy
	// machine), counted but not failed; the soak sets it.
	overrunIsLoad bool

	overlaps, backwards          []string // descriptions
	staleWrites, staleRefused    int
	refusedInside, acceptedAfter []string
}

// lostUpdates is how many critical sections' increments the counter lacks.
func (r *nemesisResult) lostUpdates() int64 { return r.completed + r.overran - r.counter }

func (r *nemesisResult) String() string {
	kinds := make([]string, 0, len(r.faults))
	for k := range r.faults {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	var fs []string
	for _, k := range kinds {
		fs = append(fs, fmt.Sprintf("%s %d", k, r.faults[k]))
	}
	return fmt.Sprintf("%s, %v: %d grants (%.0f/s), %d critical sections, %d skipped for low validity, %d overran, %d acquire failures; faults: %s; "+
		"overlapping windows %d, lost updates %d, tokens backwards %d, fenced writes %d (stale %d, of which refused %d), refused inside validity %d, accepted after a higher token %d",
		r.label, r.elapsed.Round(time.Second), r.acquired, float64(r.acquired)/r.elapsed.Seconds(), r.completed, r.skipped, r.overran, r.fail,
		strings.Join(fs, ", "), len(r.overlaps), r.lostUpdates(), len(r.backwards), len(r.writes), r.staleWrites, r.staleRefused,
		len(r.refusedInside), len(r.acceptedAfter))
}

// runNemesis runs cfg's clients and nemesis against c's masters, with a
// counter server of its own, and returns what it counted. It fails the
// test only for errors of the harness, never for what it counts.
func runNemesis(t *testing.T, c *cluster.Cluster, label string, cfg nemesisConfig, opts ...redlock.Option) *nemesisResult {
	t.Helper()
	counterSrv := cluster.Start(t, 1, cluster.WithBackend(c.Backend())).Masters[0]
	if cfg.keys == 0 {
		cfg.keys = 1
	}
	keyName := func(i int) string {
		if cfg.keys == 1 {
			return key(t)
		}
		return key(t) + ":" + strconv.Itoa(i)
	}
	for i := 0; i < cfg.keys; i++ {
		_, err := counterSrv.Do("SET", counterKey(i), 0)
		must(t, err)
	}
	store, err := fence.NewStore(counterSrv.Pool())
	must(t, err)
	for i := 0; i < cfg.fastMasters && cfg.fastRate != 0; i++ {
		must(t, c.Masters[i].SetClockRate(cfg.fastRate))
	}
	if cfg.ttl == 0 {
		cfg.ttl = 2 * time.Second
	}
	if cfg.staleEvery == 0 {
		cfg.staleEvery = 8
	}
	if cfg.staleTTL == 0 {
		cfg.staleTTL = cfg.ttl / 2
	}

	res := &nemesisResult{label: label, faults: map[string]int{}}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.duration)
	defer cancel()

	var (
		mu                                              sync.Mutex
		acquired, completed, failures, skipped, overran atomic.Int64
		overlapsSeen                                    atomic.Int64
		lastEnd                                         = make([]time.Time, cfg.keys) // per key, the latest window end seen, for early stopping
		// written is, per key, the highest token a holder's accepted
		// (not stale) write carried: what a paused holder waits to see
		// passed before it writes.
		written = make([]atomic.Uint64, cfg.keys)
	)
	var wg sync.WaitGroup
	// Half the clients pipeline, half take the pooled path: one run covers
	// both paths, and their locks must exclude each other's.
	for id := 0; id < cfg.clients; id++ {
		client := newClient(t, connPaths[id%len(connPaths)], c, opts...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			counterConn := counterSrv.Pool()
			rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
			ki := id % cfg.keys
			k := keyName(ki)
			write := func(tok uint64, stale bool, until time.Time) {
				w := fencedWrite{key: ki, client: id, fence: tok, stale: stale, until: until, started: time.Now()}
				err := store.Set(context.Background(), "fenced:"+strconv.Itoa(ki), tok, []byte(strconv.FormatUint(tok, 10)), 0)
				w.finished = time.Now()
				switch {
				case err == nil:
					w.accepted = true
					if !stale {
						raiseTo(&written[ki], tok)
					}
				case !errors.Is(err, fence.ErrStale):
					t.Errorf("client %d: fenced write: %v", id, err)
					return
				}
				mu.Lock()
				res.writes = append(res.writes, w)
				mu.Unlock()
			}
			for ctx.Err() == nil {
				// One holder in staleEvery will play the paused client, on
				// a shorter lock so it holds the others up less.
				stale, ttl := rng.IntN(cfg.staleEvery) == 0, cfg.ttl
				if stale {
					ttl = cfg.staleTTL
				}
				l, err := client.Acquire(ctx, k, redlock.WithTTL(ttl), redlock.WithWait(10*time.Second), redlock.WithFencing())
				start := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						failures.Add(1)
					}
					continue
				}
				acquired.Add(1)
				until := l.Until()
				end := until
				if time.Until(until) < ttl/4 {
					skipped.Add(1) // too little validity left to work safely
				} else if err := increment(counterConn, counterKey(ki)); err != nil {
					t.Errorf("client %d: counter: %v", id, err)
				} else if write(l.Fence(), false, until); time.Now().After(until) {
					overran.Add(1)
				} else {
					completed.Add(1)
				}
				if cfg.holdToExpiry {
					time.Sleep(time.Until(until)) // the subject: the fault's spell
				}
				if rel := time.Now(); rel.Before(end) {
					end = rel
				}
				mu.Lock()
				if start.Before(lastEnd[ki]) {
					overlapsSeen.Add(1)
				}
				if end.After(lastEnd[ki]) {
					lastEnd[ki] = end
				}
				res.windows = append(res.windows, window{key: ki, client: id, fence: l.Fence(), start: start, end: end})
				mu.Unlock()
				if cfg.stopAfterOverlaps > 0 && overlapsSeen.Load() >= int64(cfg.stopAfterOverlaps) {
					cancel()
				}
				if stale && ctx.Err() == nil {
					// Paused past the validity; wakes once a later holder
					// has written (so that its write is stale for
					// certain, whatever the load did to the others'
					// turns), and writes. Not at all when none did
					// within a few seconds or before the run ended.
					time.Sleep(time.Until(until) + 300*time.Millisecond) // the subject: the fault's spell, and the TTL past it
					wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
					if redistest.WaitFor(wctx, func() bool { return written[ki].Load() > l.Fence() }) {
						write(l.Fence(), true, until)
					}
					wcancel()
				}
				_ = l.Release(context.Background())
			}
		}()
	}

	runFaults(ctx, t, c, cfg, res.faults)
	<-ctx.Done()
	must(t, c.HealAll())
	wg.Wait()
	res.elapsed = time.Since(began)

	for i := 0; i < cfg.keys; i++ {
		v, err := redis.Int64(counterSrv.Do("GET", counterKey(i)))
		must(t, err)
		res.counter += v
	}
	res.acquired, res.completed, res.skipped = acquired.Load(), completed.Load(), skipped.Load()
	res.overran, res.fail = overran.Load(), failures.Load()
	res.analyse()
	t.Log(res)
	return res
}

// raiseTo raises v to x, unless it already holds as much.
func raiseTo(v *atomic.Uint64, x uint64) {
	for cur := v.Load(); x > cur && !v.CompareAndSwap(cur, x); cur = v.Load() {
	}
}

// runFaults is the nemesis: every few hundred ms until ctx ends, it heals
// the last faults and breaks a new random minority of c's masters with
// cfg.kinds, counting each fault in faults. Clock faults stay: a clock is
// not healed.
func runFaults(ctx context.Context, t *testing.T, c *cluster.Cluster, cfg nemesisConfig, faults map[string]int) {
	n := len(c.Masters)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for ctx.Err() == nil && len(cfg.kinds) > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(200+rng.IntN(300)) * time.Millisecond):
		}
		if err := c.HealAll(); err != nil {
			t.Errorf("nemesis heal: %v", err)
		}
		if ctx.Err() != nil {
			break
		}
		pool := cfg.victims
		if pool == nil {
			pool = rng.Perm(n)
		} else {
			pool = slices.Clone(pool)
			rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
		}
		victims := pool[:1+rng.IntN(min(len(pool), (n-1)/2))]
		if cfg.leapFast {
			for i := 0; i < cfg.fastMasters; i++ {
				if err := c.Masters[i].JumpClock(cfg.ttl + cfg.ttl/2); err != nil {
					t.Errorf("nemesis %s %v: %v", faultClockLeap, c.Masters[i], err)
				}
				faults[faultClockLeap]++
			}
		}
		for _, v := range victims {
			kind := cfg.kinds[rng.IntN(len(cfg.kinds))]
			m := c.Masters[v]
			var err error
			switch kind {
			case faultPause:
				err = m.Pause()
			case faultKill:
				err = m.Kill() // restarted by the next heal
			case faultPartition:
				err = m.Partition()
			case faultClockRate:
				err = m.SetClockRate(1 + (rng.Float64()-0.5)/100)
			case faultClockBack:
				err = m.JumpClock(-time.Duration(rng.Int64N(int64(time.Second))))
			case faultClockFwd:
				err = m.JumpClock(time.Duration(rng.Int64N(int64(time.Millisecond))))
			case faultClockLeap:
				err = m.JumpClock(cfg.ttl + cfg.ttl/2)
			default:
				t.Fatalf("unknown fault kind %q", kind)
			}
			if err != nil {
				t.Errorf("nemesis %s %v: %v", kind, m, err)
			}
			faults[kind]++
		}
	}
}

// analyse finds overlapping windows, tokens that went backwards and what
// fencing promises: a write inside its lock's validity is never refused
// (no later holder exists yet), and no write is accepted after a write
// with a higher token had completed.
func (r *nemesisResult) analyse() {
	ws := r.windows
	slices.SortFunc(ws, func(a, b window) int {
		if a.key != b.key {
			return a.key - b.key
		}
		return a.start.Compare(b.start)
	})
	var maxEnd window
	for i, cur := range ws {
		if i > 0 && cur.key != ws[i-1].key {
			maxEnd = window{key: cur.key}
			i = 0 // the first window of its key
		}
		if i > 0 && cur.start.Before(maxEnd.end) {
			r.overlaps = append(r.overlaps, fmt.Sprintf("validity windows overlap: client %d held [%v, %v], client %d from %v (%v early)",
				maxEnd.client, maxEnd.start.Format("15:04:05.000000"), maxEnd.end.Format("15:04:05.000000"),
				cur.client, cur.start.Format("15:04:05.000000"), maxEnd.end.Sub(cur.start)))
		}
		if i > 0 && cur.fence <= ws[i-1].fence {
			r.backwards = append(r.backwards, fmt.Sprintf("fencing tokens went backwards: client %d got %d, the next grant (client %d) %d",
				ws[i-1].client, ws[i-1].fence, cur.client, cur.fence))
		}
		if cur.end.After(maxEnd.end) {
			maxEnd = cur
		}
	}
	// The latest accepted write's start, by token, to find an accepted
	// write that began after a higher token's had finished.
	byFence := slices.Clone(r.writes)
	slices.SortFunc(byFence, func(a, b fencedWrite) int {
		switch {
		case a.key != b.key:
			return a.key - b.key
		case a.fence < b.fence:
			return -1
		case a.fence > b.fence:
			return 1
		}
		return 0
	})
	for _, w := range r.writes {
		// Refused although the store answered before the lock's validity
		// ended. (A holder starved past its validity may be refused
		// rightly: a later holder wrote with a higher token.)
		if !w.stale && !w.accepted && w.finished.Before(w.until) {
			r.refusedInside = append(r.refusedInside, fmt.Sprintf("client %d's write with token %d, inside its lock's validity, was refused", w.client, w.fence))
		}
		if w.stale {
			r.staleWrites++
			if !w.accepted {
				r.staleRefused++
			}
		}
	}
	// Walk tokens from the highest down, keeping the earliest finish of an
	// accepted write with a higher token.
	var earliest time.Time
	var earliestW fencedWrite
	for i := len(byFence) - 1; i >= 0; {
		if i < len(byFence)-1 && byFence[i].key != byFence[i+1].key {
			earliest = time.Time{} // a new key: its own tokens
		}
		j := i
		for j >= 0 && byFence[j].key == byFence[i].key && byFence[j].fence == byFence[i].fence {
			w := byFence[j]
			if w.accepted && !earliest.IsZero() && earliest.Before(w.started) {
				r.acceptedAfter = append(r.acceptedAfter, fmt.Sprintf("client %d's write with token %d was accepted after client %d's write with token %d",
					w.client, w.fence, earliestW.client, earliestW.fence))
			}
			j--
		}
		for k := i; k > j; k-- {
			if w := byFence[k]; w.accepted && (earliest.IsZero() || w.finished.Before(earliest)) {
				earliest, earliestW = w.finished, w
			}
		}
		i = j
	}
}

// requireSafe fails the test for anything the lock promises within its
// assumptions: no overlapping windows, no lost update, tokens ordered by
// grant, no critical section past its validity, fencing's two rules, and
// a stale-writer check that did bite.
func (r *nemesisResult) requireSafe(t *testing.T) {
	t.Helper()
	if r.acquired == 0 {
		t.Fatal("no lock was ever acquired")
	}
	if lost := r.lostUpdates(); lost != 0 {
		t.Errorf("counter = %d, but %d critical sections ran: %d increments were lost to overlapping holders", r.counter, r.completed+r.overran, lost)
	}
	if r.overran > 0 && !r.overrunIsLoad {
		t.Errorf("%d critical sections ended after their lock's validity", r.overran)
	}
	for _, list := range [][]string{r.overlaps, r.backwards, r.refusedInside, r.acceptedAfter} {
		for i, s := range list {
			if i == 5 {
				t.Errorf("... and %d more", len(list)-5)
				break
			}
			t.Error(s)
		}
	}
	if r.staleWrites > 0 && r.staleRefused == 0 {
		t.Errorf("no paused holder's write was refused: the stale-writer check did not bite")
	}
}

func TestNemesis(t *testing.T) {
	cluster.ForEachBackend(t, func(t *testing.T, b cluster.Backend) {
		kinds := []string{faultPause, faultKill, faultPartition}
		if b == cluster.Process {
			kinds = kinds[:2]
			t.Log("the process backend cannot partition: this run's nemesis pauses and kills/restarts only")
		}
		c := cluster.Start(t, 5, cluster.WithBackend(b), cluster.WithAOF())
		r := runNemesis(t, c, string(b), nemesisConfig{clients: 8, duration: *nemesisDuration, kinds: kinds})
		// A holder starved past its validity by a busy machine is
		// assumption 5 (the holder's own pause), as in the soak and the
		// clock suites: counted and printed. The windows are judged by
		// their validity, so an overlap or a lost update still fails,
		// and the paused holders' stale writes must still be refused.
		r.overrunIsLoad = true
		r.requireSafe(t)
	})
}

// increment is the unprotected read-sleep-write that only the lock keeps
// correct.
func increment(p interface {
	GetContext(context.Context) (redis.Conn, error)
}, counter string) error {
	conn, err := p.GetContext(context.Background())
	if err != nil {
		return err
	}
	defer conn.Close()
	v, err := redis.Int64(conn.Do("GET", counter))
	if err != nil && !errors.Is(err, redis.ErrNil) {
		return err
	}
	time.Sleep(2 * time.Millisecond) // the subject: a read-modify-write window a second holder would fall into
	_, err = conn.Do("SET", counter, strconv.FormatInt(v+1, 10))
	return err
}

// counterKey is the counter of the clients of key i.
func counterKey(i int) string { return "counter:" + strconv.Itoa(i) }
