package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
)

// result is what one library did in one cell of a workload.
type result struct {
	cycles      int
	elapsed     time.Duration
	lat         []time.Duration // per cycle (sequential) or per wait (handoff)
	cycle       []time.Duration // per whole lock+hold+unlock cycle (handoff, beside lat)
	perCli      []int
	acqFailures int // lock calls that failed while the cell was running
	relFailures int // unlock calls that failed (for quorumlock: not confirmed, or not held)
	// samples are the first errors of the cell (at most maxSamples).
	samples []string
	// handoffs are the times from a release's start to the next lock's
	// return, when that lock went to another client (a waiter); self
	// counts the locks the releasing client took again itself.
	handoffs []time.Duration
	self     int
	// holds are how long each lock was held, from its lock's return to
	// its release's start (wait cells with a hold: the sleep as slept).
	holds []time.Duration
}

func (r *result) rate() float64 { return float64(r.cycles) / r.elapsed.Seconds() }

func (r *result) pct(p float64) time.Duration { return percentile(r.lat, p) }

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

// jain is Jain's fairness index of the per-client counts: 1 when every
// client completed as many cycles as every other.
func (r *result) jain() float64 {
	var sum, sq float64
	for _, x := range r.perCli {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(r.perCli)) * sq)
}

// maxSamples is how many errors of a cell are kept, word for word.
const maxSamples = 3

// freshKeys, as run's keysPerClient, gives each client a key never used
// before on every cycle.
const freshKeys = -1

// run drives one goroutine per locker (each a client of its own, as
// separate processes would be), each holding every lock for hold, until
// the duration is spent. With keysPerClient 0 all clients lock key; with
// k ≥ 1 each client cycles through k keys of its own; with freshKeys each
// takes a new key of its own every cycle. It records the wait for each
// lock (from the call to its return) when wait is true, else the whole
// lock+unlock cycle. Every failed lock or unlock call is counted, for the
// cell (named by key) in e's error log.
func run(ctx context.Context, e *env, lockers []locker, key string, hold time.Duration, keysPerClient int, wait bool) *result {
	clients := len(lockers)
	ctx, cancel := context.WithTimeout(ctx, e.duration)
	defer cancel()
	res := &result{perCli: make([]int, clients)}
	var mu sync.Mutex
	var lastRelease atomic.Int64 // unix nanos of the latest release's start
	var lastHolder atomic.Int64  // 1 + the id of the client that held last
	var wg sync.WaitGroup
	sample := func(what string, err error) {
		mu.Lock()
		if len(res.samples) < maxSamples {
			res.samples = append(res.samples, what+": "+err.Error())
		}
		mu.Unlock()
	}
	start := time.Now()
	for id := 0; id < clients; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := key
			if keysPerClient == 1 {
				k = fmt.Sprintf("%s:%d", key, id)
			}
			var lat, hos, cyc, held []time.Duration
			n, acqFails, relFails, self := 0, 0, 0, 0
			for ctx.Err() == nil {
				switch {
				case keysPerClient > 1:
					k = fmt.Sprintf("%s:%d", key, id*keysPerClient+n%keysPerClient)
				case keysPerClient == freshKeys:
					k = fmt.Sprintf("%s:%d:%d:%d", key, id, n, acqFails)
				}
				t0 := time.Now()
				unlock, err := lockers[id].lock(ctx, k)
				if err != nil {
					if ctx.Err() == nil {
						acqFails++
						sample("lock", err)
						if acqFails <= 2 && os.Getenv("QUORUMLOCK_BENCH_ERRORS") != "" {
							log.Printf("lock %s: %v", k, err)
						}
						if keysPerClient == 1 {
							// What the failure left (until the TTL, or
							// until finished in the background) must not
							// fail the next attempts too: a fresh key.
							k = fmt.Sprintf("%s:%d:%d", key, id, acqFails)
						}
					}
					continue
				}
				got := time.Now()
				waited := got.Sub(t0)
				var handoff time.Duration
				if prev := lastHolder.Swap(int64(id) + 1); prev == int64(id)+1 {
					self++
				} else if rel := lastRelease.Load(); rel != 0 && prev != 0 {
					handoff = got.Sub(time.Unix(0, rel))
				}
				if hold > 0 {
					time.Sleep(hold)
				}
				released := time.Now()
				lastRelease.Store(released.UnixNano())
				if err := unlock(context.Background()); err != nil {
					relFails++
					sample("unlock", err)
					if keysPerClient == 1 {
						k = fmt.Sprintf("%s:%d:r%d", key, id, relFails)
					}
				}
				if wait {
					lat = append(lat, waited)
					cyc = append(cyc, time.Since(t0))
					if handoff > 0 {
						hos = append(hos, handoff)
					}
					if hold > 0 {
						held = append(held, released.Sub(got))
					}
				} else {
					lat = append(lat, time.Since(t0))
				}
				n++
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			res.handoffs = append(res.handoffs, hos...)
			res.cycle = append(res.cycle, cyc...)
			res.holds = append(res.holds, held...)
			res.perCli[id] = n
			res.cycles += n
			res.acqFailures += acqFails
			res.relFailures += relFails
			res.self += self
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	e.errs.note(key, res)
	return res
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

// ratio is quorumlock's advantage: how many times the peer's figure
// quorumlock's is, the right way round for the figure.
func ratio(ours, theirs float64, higherIsBetter bool) string {
	if ours == 0 || theirs == 0 {
		return "–"
	}
	if higherIsBetter {
		return fmt.Sprintf("%.2f×", ours/theirs)
	}
	return fmt.Sprintf("%.2f×", theirs/ours)
}

// sequential: one client, lock+unlock in a loop on its own key.
func sequential(ctx context.Context, e *env) string {
	var b strings.Builder
	b.WriteString("## One client, sequential lock+unlock\n\n")
	b.WriteString(cpuNote + "| N | library | cycles/s | p50 ms | p99 ms | client CPU µs/cycle | masters' CPU µs/cycle | client read+write syscalls/cycle | quorumlock's p50 advantage |\n|---|---|---|---|---|---|---|---|---|\n")
	ns := []int{1, 3, 5, 7}
	if e.quick {
		ns = []int{1, 5}
	}
	for _, n := range ns {
		compare(ctx, e, &b, strconv.Itoa(n), n, 1, "seq", "seq", func(r *result) float64 { return float64(r.pct(0.5)) }, false)
	}
	b.WriteString("\n")
	return b.String()
}

// compareTurns is how many turns a compared cell is measured in: each
// library runs a turn of the cell's duration in turn, in an order that
// rotates from turn to turn, so that the machine's changing load (other
// programs, the masters' housekeeping) weighs on every library alike,
// rather than on whichever library's cell it fell in.
const compareTurns = 4

// compare runs every library that runs in the workload with clients
// goroutines sharing one instance, each on a key of its own, and writes a
// row per library with quorumlock's (the default, on addresses) advantage
// in figure over each peer. It records "<tag><n> <library> rate|p50|p99".
// Every library is made first and warmed up (connections dialed, caches
// and heaps grown: a turn of a tenth of the cell, at most 200 ms, not
// counted); then the cell is measured in compareTurns turns.
func compare(ctx context.Context, e *env, b *strings.Builder, label string, n, clients int, tag, in string, figure func(*result) float64, higherBetter bool) {
	type cell struct {
		lb        lib
		l         locker
		lockers   []locker
		key       string
		r         *result
		cpu, mcpu time.Duration
		syscalls  int64
	}
	var cells []*cell
	for _, lb := range libs {
		if !lb.runs(in) {
			continue
		}
		l := lb.make(e, n)
		if l == nil {
			continue
		}
		c := &cell{lb: lb, l: l, lockers: make([]locker, clients), key: fmt.Sprintf("bench:%s:%s:%d", tag, lb.name, n)}
		for i := range c.lockers {
			c.lockers[i] = l
		}
		cells = append(cells, c)
	}
	warm, turn := *e, *e
	warm.duration = min(e.duration/10, 200*time.Millisecond)
	turn.duration = e.duration / compareTurns
	for _, c := range cells {
		run(ctx, &warm, c.lockers, c.key, 0, 1, false)
	}
	for t := range compareTurns {
		for i := range cells {
			c := cells[(i+t)%len(cells)]
			cpu0, mcpu0, sys0 := selfCPU(), mastersCPU(e.addrs[:n]), selfSyscalls()
			r := run(ctx, &turn, c.lockers, c.key, 0, 1, false)
			c.cpu += selfCPU() - cpu0
			c.mcpu += mastersCPU(e.addrs[:n]) - mcpu0
			c.syscalls += selfSyscalls() - sys0
			c.r = c.r.add(r)
		}
	}
	var ours *result
	for _, c := range cells {
		c.l.close()
		r := c.r
		e.record(fmt.Sprintf("%s%d %s", tag, n, c.lb.name), r)
		perCycle := func(d time.Duration) string {
			return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)/float64(max(r.cycles, 1)))
		}
		adv := "—"
		switch {
		case c.lb.name == qlName:
			ours = r
		case !c.lb.ours() && ours != nil:
			adv = ratio(figure(ours), figure(r), higherBetter)
		}
		fmt.Fprintf(b, "| %s | %s | %.0f | %s | %s | %s | %s | %.1f | %s |\n", label, c.lb.name, r.rate(), ms(r.pct(0.5)), ms(r.pct(0.99)),
			perCycle(c.cpu), perCycle(c.mcpu), float64(c.syscalls)/float64(max(r.cycles, 1)), adv)
	}
}

// add is r and o measured one after the other, as one result (r may be
// nil).
func (r *result) add(o *result) *result {
	if r == nil {
		return o
	}
	r.cycles += o.cycles
	r.elapsed += o.elapsed
	r.lat = append(r.lat, o.lat...)
	for i, n := range o.perCli {
		r.perCli[i] += n
	}
	r.acqFailures += o.acqFailures
	r.relFailures += o.relFailures
	for _, x := range o.samples {
		if len(r.samples) < maxSamples {
			r.samples = append(r.samples, x)
		}
	}
	r.handoffs = append(r.handoffs, o.handoffs...)
	r.self += o.self
	return r
}

// record keeps a cell's figures for the targets and the plot.
func (e *env) record(prefix string, r *result) {
	e.metrics[prefix+" rate"] = r.rate()
	e.metrics[prefix+" p50"] = float64(r.pct(0.5))
	e.metrics[prefix+" p99"] = float64(r.pct(0.99))
}

// handoff: 8 clients on one key; how fast the lock passes from one holder
// to the next, and how evenly.
func handoff(ctx context.Context, e *env) string {
	var b strings.Builder
	b.WriteString("## Handoff: 8 clients on one key\n\n")
	rtt, rttSet := roundTrip(ctx, e)
	e.metrics["rtt"] = float64(rtt)
	fmt.Fprintf(&b, "Single-command round trip to a master, measured just before this table from this process (one connection, one command at a time, p50): "+
		"PING %s ms, SET NX PX %s ms. The handoff target is judged against the PING figure.\n\n", ms(rtt), ms(rttSet))
	fmt.Fprintf(&b, "Eight clients, each with its own connections (as eight processes would have), loop for %v: lock (TTL %v), hold, unlock. The wait is from the call to lock to its return. "+
		"Jain's index of the per-client completion counts is 1 when every client got the lock equally often; errors are the row's failed lock and unlock calls.\n\n", e.contentionCell, contentionTTL)
	b.WriteString("The handoff is the time from a holder starting its release to the lock being returned to another client (a waiter); " +
		"\"self\" is the share of locks that went to the client that released last (barging by the releaser), which the handoff leaves out.\n\n")
	b.WriteString("| N | hold | library | cycles/s | p50 wait ms | p99 wait ms | p99 cycle ms | p50 handoff ms | handoff ÷ RTT | self | Jain | attempts per lock | errors | per-client cycles | quorumlock's cycles/s advantage |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	ns := contentionNs
	if e.quick {
		ns = []int{5}
	}
	var cells []string
	for _, n := range ns {
		for _, hold := range contentionHolds {
			cells = append(cells, contentionCellName(n, hold))
			var ours *result
			errs := 0
			for _, lb := range libs {
				if !lb.runs("handoff") {
					continue
				}
				c := contend(ctx, e, lb, n, 8, hold, fmt.Sprintf("bench:handoff:%s:%d:%v", lb.name, n, hold))
				if c == nil {
					continue
				}
				r := c.r
				errs += c.errors()
				adv := "—"
				switch {
				case lb.name == qlName:
					ours = r
				case !lb.ours() && ours != nil:
					adv = ratio(ours.rate(), r.rate(), true)
				}
				ho := percentile(r.handoffs, 0.5)
				prefix := contentionPrefix(n, hold) + lb.name
				e.metrics[prefix+" rate"] = r.rate()
				e.metrics[prefix+" p99"] = float64(r.pct(0.99))
				e.metrics[prefix+" p99 cycle"] = float64(percentile(r.cycle, 0.99))
				e.metrics[prefix+" jain"] = r.jain()
				e.metrics[prefix+" handoff"] = float64(ho)
				if c.attempts > 0 {
					e.metrics[prefix+" attempts"] = c.attempts
				}
				fmt.Fprintf(&b, "| %d | %v | %s | %.0f | %s | %s | %s | %s | %.1f× | %.0f%% | %.3f | %s | %d | %v | %s |\n",
					n, hold, lb.name, r.rate(), ms(r.pct(0.5)), ms(r.pct(0.99)), ms(percentile(r.cycle, 0.99)), ms(ho), float64(ho)/float64(rtt),
					100*c.selfShare(), r.jain(), c.attemptsShown(), c.errors(), r.perCli, adv)
			}
			e.metrics[contentionPrefix(n, hold)+"errors"] = float64(errs)
		}
	}
	b.WriteString("\n")
	b.WriteString(verdicts(e.metrics, cells...))
	return b.String()
}

// parallel: 64 goroutines of one application, each locking its own key,
// through one instance of the library.
func parallel(ctx context.Context, e *env) string {
	var b strings.Builder
	b.WriteString("## 64 clients on their own keys\n\n")
	b.WriteString("64 goroutines share one instance of each library (one application), each looping lock+unlock on a key of its own.\n\n")
	b.WriteString(cpuNote)
	header := "| N | library | cycles/s | p50 ms | p99 ms | client CPU µs/cycle | masters' CPU µs/cycle | client read+write syscalls/cycle | quorumlock's cycles/s advantage |\n|---|---|---|---|---|---|---|---|---|\n"
	// N=5 first, between two measurements of the masters' ceiling (the
	// workload before this one, and again right after): it is judged
	// beside them, and the machine's load drifts.
	for _, n := range []int{5, 1} {
		b.WriteString(header)
		compare(ctx, e, &b, strconv.Itoa(n), n, 64, "par", "par", (*result).rate, true)
		b.WriteString("\n")
		if n == 5 {
			b.WriteString(ceilingAgain(ctx, e))
		}
	}
	return b.String()
}

// degradedCase is one cell of the degraded workload.
type degradedCase struct {
	label string // for the table
	tag   string // for the metrics
	hung  int    // masters stopped (the last ones)
	mid   bool   // stopped after a third of the cell, not before it
	peers bool   // go-redsync runs it too (each of its cycles waits for its 1 s read timeout)
}

var degradedCases = []degradedCase{
	{"none", "healthy", 0, false, true},
	{"1 of 5, whole cell", "hung1", 1, false, false},
	{"2 of 5, whole cell", "hung2", 2, false, true},
	{"2 of 5, from ⅓ of the cell", "hung2mid", 2, true, false},
}

// degradedLoads are the CPU conditions the cases run under: a quiet
// machine, and one busy loop per core in processes of their own.
var degradedLoads = []struct {
	label, tag string
	busy       bool
}{{"quiet", "quiet", false}, {"busy loop per core", "busy", true}}

// degraded: one client, sequential, on N=5 with masters hung (SIGSTOP),
// on a quiet machine and with every core kept busy by other processes.
// Each case is judged against the healthy p99 measured under the same CPU
// load in the same run. Needs masters the bench started itself.
func degraded(ctx context.Context, e *env) string {
	var b strings.Builder
	b.WriteString("## Degraded: hung masters\n\n")
	if e.servers == nil {
		b.WriteString("Skipped: the masters were given with -masters, and the bench pauses only masters it started.\n\n")
		return b.String()
	}
	cell := e.hungCell
	fmt.Fprintf(&b, "One client, sequential lock+unlock on N=5 while masters are stopped with SIGSTOP (they accept connections and never answer), "+
		"either before the client starts (whole cell) or after a third of the cell, for the rest of it. Each cell runs %v. "+
		"Every case runs on a quiet machine and again with one busy loop per core (a spinning process each, as other programs keeping the CPUs busy), "+
		"and is judged against the healthy p99 measured under the same CPU load in this run. "+
		"quorumlock's per-master timeout is its default, 50 ms; go-redsync's redigo pools have 1 s read timeouts, so each of its cycles with a hung master "+
		"takes a second or more: it runs the healthy and whole-cell cases only. A library that completes no cycle shows 0.\n\n", cell)
	b.WriteString("| CPUs | hung | library | cycles/s | p50 ms | p99 ms | p99 ÷ healthy p99 | quorumlock's p99 advantage |\n|---|---|---|---|---|---|---|---|\n")
	var worst []string
	for _, load := range degradedLoads {
		var bz *busy
		if load.busy {
			var err error
			if bz, err = startBusy(runtime.NumCPU()); err != nil {
				panic(err)
			}
		}
		healthy := map[string]*result{}
		for _, dc := range degradedCases {
			if load.busy && dc.hung == 1 {
				continue
			}
			// The peers first, so that nothing quorumlock did to the
			// stopped masters' accept queues can slow them.
			var order []lib
			for _, lb := range libs {
				if lb.runs("degraded") && !lb.ours() && dc.peers {
					order = append(order, lb)
				}
			}
			for _, lb := range libs {
				if lb.runs("degraded") && lb.ours() {
					order = append(order, lb)
				}
			}
			results := map[string]*result{}
			for _, lb := range order {
				l := lb.make(e, 5) // dials nothing yet
				if l == nil {
					continue
				}
				log.Printf("degraded: %s, hung %s, %s", load.label, dc.label, lb.name)
				results[lb.name] = degradedCell(ctx, e, l, dc, cell, fmt.Sprintf("bench:deg:%s:%s:%s", load.tag, dc.tag, lb.name))
				e.metrics[fmt.Sprintf("deg-%s-%s %s p99", load.tag, dc.tag, lb.name)] = float64(results[lb.name].pct(0.99))
			}
			if dc.hung == 0 {
				healthy = results
			}
			ours := results["quorumlock"]
			for _, lb := range libs {
				r, ok := results[lb.name]
				if !ok {
					continue
				}
				adv, rel := "—", "—"
				if !lb.ours() {
					adv = ratio(float64(ours.pct(0.99)), float64(r.pct(0.99)), false)
				}
				if h := healthy[lb.name]; h != nil && dc.hung > 0 && h.pct(0.99) > 0 && r.cycles > 0 {
					rel = fmt.Sprintf("%.2f×", float64(r.pct(0.99))/float64(h.pct(0.99)))
					if lb.name == "quorumlock" && dc.hung == 2 {
						worst = append(worst, fmt.Sprintf("%s (%s): %s", dc.label, load.label, rel))
					}
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %.1f | %s | %s | %s | %s |\n", load.label, dc.label, lb.name, r.rate(), ms(r.pct(0.5)), ms(r.pct(0.99)), rel, adv)
			}
		}
		bz.stop()
	}
	fmt.Fprintf(&b, "\nTarget: with 2 of 5 masters hung, quorumlock's p99 ≤ 2× its healthy p99 under the same CPU load. This run: %s.\n\n", strings.Join(worst, "; "))
	return b.String()
}

// degradedCell runs l (made, not yet used) through one case: the last dc.hung
// masters stopped for the whole cell or from a third of it on, and
// running again (and answering) before it returns.
func degradedCell(ctx context.Context, e *env, l locker, dc degradedCase, cell time.Duration, key string) *result {
	hung := e.servers[5-dc.hung : 5]
	pause := func() {
		for _, s := range hung {
			if err := s.Pause(); err != nil {
				panic(err)
			}
		}
	}
	if !dc.mid {
		pause()
	}
	de := *e
	de.duration = cell
	var paused sync.WaitGroup
	if dc.mid {
		paused.Add(1)
		t := time.AfterFunc(cell/3, func() { pause(); paused.Done() })
		defer func() {
			if t.Stop() {
				paused.Done()
			}
		}()
	}
	r := run(ctx, &de, []locker{l}, key, 0, 1, false)
	l.close()
	paused.Wait()
	for _, s := range hung {
		if err := s.Resume(); err != nil {
			panic(err)
		}
	}
	for _, s := range hung { // it works through what queued up while it was stopped
		if _, err := s.Do("PING"); err != nil {
			panic(err)
		}
	}
	return r
}

// allocs: allocations and bytes per lock+unlock on N=5, measured with
// testing.Benchmark for each library.
func allocs(ctx context.Context, e *env) string {
	var b strings.Builder
	b.WriteString("## Allocations per lock+unlock, N=5\n\n| library | allocs/op | B/op | ns/op |\n|---|---|---|---|\n")
	for _, lb := range libs {
		if !lb.runs("allocs") {
			continue
		}
		l := lb.make(e, 5)
		if l == nil {
			continue
		}
		key := "bench:allocs:" + lb.name
		// testing.Benchmark outside a test cannot fail: failures are
		// counted, and the first one shown.
		failures, gen := 0, 0
		var first error
		runtime.GC() // what earlier cells left to collect is not counted here
		res := testing.Benchmark(func(tb *testing.B) {
			tb.ReportAllocs()
			for i := 0; i < tb.N; i++ {
				unlock, err := l.lock(ctx, fmt.Sprintf("%s:%d", key, gen))
				if err == nil {
					err = unlock(ctx)
				}
				if err != nil {
					failures++
					gen++ // a key a failure left behind is not used again
					first = cmp.Or(first, err)
				}
			}
		})
		l.close()
		e.metrics["allocs "+lb.name] = float64(res.AllocsPerOp())
		failed := ""
		if failures > 0 {
			failed = fmt.Sprintf(" (%d failed: %v)", failures, first)
		}
		fmt.Fprintf(&b, "| %s%s | %d | %d | %d |\n", lb.name, failed, res.AllocsPerOp(), res.AllocedBytesPerOp(), res.NsPerOp())
	}
	b.WriteString("\n")
	return b.String()
}

// scale: throughput on N=5 as the clients of one application grow, and as
// the keys they lock spread over more distinct keys.
func scale(ctx context.Context, e *env) string {
	var b strings.Builder
	b.WriteString("## Scale on N=5\n\n")
	b.WriteString("Clients are goroutines sharing one instance of each library, each locking keys of its own.\n\n")
	b.WriteString(cpuNote + "| clients | library | cycles/s | p50 ms | p99 ms | client CPU µs/cycle | masters' CPU µs/cycle | client read+write syscalls/cycle | quorumlock's cycles/s advantage |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, clients := range scaleClients {
		compare(ctx, e, &b, strconv.Itoa(clients), 5, clients, fmt.Sprintf("scale%d-", clients), "scale", (*result).rate, true)
	}
	b.WriteString("\n64 clients, each cycling through its share of K distinct keys (every key locked and released in turn):\n\n")
	b.WriteString("| distinct keys | library | cycles/s | p50 ms | p99 ms |\n|---|---|---|---|---|\n")
	for _, keys := range []int{64, 10_000, 100_000} {
		for _, lb := range libs {
			if !lb.runs("keys") {
				continue
			}
			l := lb.make(e, 5)
			if l == nil {
				continue
			}
			lockers := make([]locker, 64)
			for i := range lockers {
				lockers[i] = l
			}
			r := run(ctx, e, lockers, fmt.Sprintf("bench:keys:%s:%d", lb.name, keys), 0, max(keys/len(lockers), 1), false)
			l.close()
			fmt.Fprintf(&b, "| %d | %s | %.0f | %s | %s |\n", keys, lb.name, r.rate(), ms(r.pct(0.5)), ms(r.pct(0.99)))
		}
	}
	b.WriteString("\n")
	return b.String()
}

var scaleClients = []int{1, 4, 16, 64, 256}

// cpuNote explains the CPU columns of the comparison tables.
const cpuNote = "Client CPU is this process's user+system time over the cell, masters' CPU the masters' own (INFO cpu), each per cycle: on 2 shared cores the two together bound the throughput. " +
	"Syscalls are this process's read and write system calls (/proc/self/io): fewer per cycle means commands batched into fewer writes and reads.\n\n"

// selfSyscalls is this process's read and write system calls so far
// (syscr + syscw in /proc/self/io), or 0 where that file is missing.
func selfSyscalls() int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	var n int64
	for _, line := range strings.Split(string(data), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if ok && (name == "syscr" || name == "syscw") {
			x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			n += x
		}
	}
	return n
}

// selfCPU is this process's user+system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// mastersCPU sums the masters' user+system CPU time (INFO cpu).
func mastersCPU(addrs []string) time.Duration {
	var total time.Duration
	for _, addr := range addrs {
		c, err := redigo.Dial("tcp", addr)
		if err != nil {
			return 0
		}
		info, err := redigo.String(c.Do("INFO", "cpu"))
		c.Close()
		if err != nil {
			return 0
		}
		for _, line := range strings.Split(info, "\n") {
			name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
				f, _ := strconv.ParseFloat(v, 64)
				total += time.Duration(f * float64(time.Second))
			}
		}
	}
	return total
}

// attemptsPerLock is the mean number of attempts per lock the lockers
// took, or 0 when they do not count them (the peers).
func attemptsPerLock(lockers []locker) float64 {
	var attempts, acquired int64
	for _, l := range lockers {
		if ac, ok := l.(attemptCounter); ok {
			a, n := ac.counts()
			attempts += a
			acquired += n
		}
	}
	if acquired == 0 {
		return 0
	}
	return float64(attempts) / float64(acquired)
}
