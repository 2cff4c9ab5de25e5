package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	redigo "github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/keys"
)

// handoffDiag: where the time of a handoff goes, for quorumlock on N=5
// with no hold. The same cell as the handoff table's, with 8 clients and
// with 2 (one waiter: no herd), each watched from outside: a subscriber
// of this process on every master timestamps the release notices, so a
// handoff splits into release start → first notice here, and first
// notice → the woken waiter holds. The masters' command counts (INFO
// commandstats) give the commands each handoff cost; and one client's
// acquisition alone on a free key (TryAcquire, N=5) is the cost of one
// acquire round.
func handoffDiag(ctx context.Context, e *env) string {
	var b strings.Builder
	b.WriteString("## Where a handoff's time goes (quorumlock, N=5, no hold)\n\n")
	rtt, _ := roundTrip(ctx, e)
	round := acquireRound(ctx, e)
	floor := floorRound(ctx, e)
	fmt.Fprintf(&b, "Single-command round trip (PING, p50) %s ms; one acquire round alone (TryAcquire of a free key by one client, N=5, p50) %s ms = %.1f× RTT; "+
		"the floor client's SET NX PX to all five masters (write all, read all, p50) %s ms = %.1f× RTT. "+
		"A handoff cannot take less than a notice (a release reaching one master, ≥ 1 RTT) and an acquire round after it.\n\n",
		ms(rtt), ms(round), float64(round)/float64(rtt), ms(floor), float64(floor)/float64(rtt))
	e.metrics["diag round"] = float64(round)
	e.metrics["diag floor round"] = float64(floor)
	b.WriteString("A subscriber of this process on every master timestamps the release notices. " +
		"Release → notice is from a holder starting its release to the first notice of it arriving here; notice → holds is from there to the woken waiter's Acquire returning. " +
		"Commands per cycle are all commands the five masters ran (INFO commandstats) over the cycles.\n\n")
	b.WriteString("Each time is also given in round trips (÷ the PING RTT above); attempts per lock are the Acquire attempts each lock took (Lock.Attempts): 1 when a woken waiter wins at once.\n\n")
	b.WriteString("| clients | library | cycles/s | p50 handoff ms (RTTs) | p50 release → notice ms (RTTs) | p50 notice → holds ms (RTTs) | p90 notice → holds ms | handoffs with no notice first | attempts per lock | commands per cycle, all masters |\n|---|---|---|---|---|---|---|---|---|---|\n")
	inRTT := func(d time.Duration) string { return fmt.Sprintf("%s (%.1f)", ms(d), float64(d)/float64(max(rtt, 1))) }
	for _, clients := range []int{2, 8} {
		for _, lb := range libs {
			if lb.name != qlName && lb.name != qlPooledName {
				continue
			}
			d := diagCell(ctx, e, lb, clients)
			fmt.Fprintf(&b, "| %d | %s | %.0f | %s | %s | %s | %s | %d of %d | %.2f | %s |\n", clients, lb.name, d.rate, inRTT(d.handoff), inRTT(d.notice), inRTT(d.rest), ms(d.rest90), d.unannounced, d.handoffs, d.attempts, d.commands)
			e.metrics[fmt.Sprintf("diag%d %s attempts", clients, lb.name)] = d.attempts
		}
	}
	b.WriteString("\n")
	return b.String()
}

// acquireRound is the p50 of one client's TryAcquire of a free key, N=5.
func acquireRound(ctx context.Context, e *env) time.Duration {
	l := newQuorumlock(e, 5).(*qlLocker)
	l.try = true
	defer l.close()
	var lat []time.Duration
	end := time.Now().Add(e.duration / 3)
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		t0 := time.Now()
		unlock, err := l.lock(ctx, fmt.Sprintf("bench:diag:round:%d", i))
		if err != nil {
			continue // the machine is loaded: a master answered late
		}
		lat = append(lat, time.Since(t0))
		_ = unlock(ctx)
	}
	return percentile(lat, 0.5)
}

// floorRound is the p50 of the floor client's SET NX PX to five masters
// (written to all, then every reply read), without its DEL.
func floorRound(ctx context.Context, e *env) time.Duration {
	f := newFloor(e, 5).(*floorLocker)
	defer f.close()
	var lat []time.Duration
	end := time.Now().Add(e.duration / 3)
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		t0 := time.Now()
		unlock, err := f.lock(ctx, fmt.Sprintf("bench:diag:floor:%d", i))
		lat = append(lat, time.Since(t0))
		if err != nil {
			panic(err)
		}
		if err := unlock(ctx); err != nil {
			panic(err)
		}
	}
	return percentile(lat, 0.5)
}

type diagResult struct {
	rate                  float64
	handoff, notice, rest time.Duration
	rest90                time.Duration
	handoffs, unannounced int
	attempts              float64 // per lock (Lock.Attempts)
	commands              string
}

// diagCell runs clients clients of lb on one key, N=5, no hold, with
// subscribers timestamping the notices.
func diagCell(ctx context.Context, e *env, lb lib, clients int) diagResult {
	key := fmt.Sprintf("bench:diag:%s:%d", lb.name, clients)
	before := commandStats(e.addrs[:5])

	var mu sync.Mutex
	var notices []time.Time
	subCtx, stopSubs := context.WithCancel(ctx)
	var subs sync.WaitGroup
	for _, addr := range e.addrs[:5] {
		c, err := redigo.Dial("tcp", addr)
		if err != nil {
			panic(err)
		}
		psc := redigo.PubSubConn{Conn: c}
		if err := psc.Subscribe(keys.WakePrefix + key); err != nil {
			panic(err)
		}
		if _, ok := psc.Receive().(redigo.Subscription); !ok {
			panic("bench: no subscription confirmation")
		}
		subs.Add(1)
		go func() {
			defer subs.Done()
			for {
				switch psc.Receive().(type) {
				case redigo.Message:
					t := time.Now()
					mu.Lock()
					notices = append(notices, t)
					mu.Unlock()
				case error:
					return
				}
			}
		}()
		go func() { <-subCtx.Done(); c.Close() }()
	}

	// The cycles, with every release's start and every handoff's end.
	lockers := make([]locker, clients)
	for i := range lockers {
		lockers[i] = lb.make(e, 5)
	}
	type event struct {
		t       time.Time
		release bool
		client  int
	}
	var evMu sync.Mutex
	var events []event
	cctx, cancel := context.WithTimeout(ctx, e.duration)
	var wg sync.WaitGroup
	cycles := 0
	start := time.Now()
	for id := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []event
			n := 0
			for cctx.Err() == nil {
				unlock, err := lockers[id].lock(cctx, key)
				if err != nil {
					continue
				}
				mine = append(mine, event{time.Now(), false, id})
				mine = append(mine, event{time.Now(), true, id})
				_ = unlock(context.Background()) // a failure shows as a slow handoff
				n++
			}
			evMu.Lock()
			events = append(events, mine...)
			cycles += n
			evMu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cancel()
	attempts := attemptsPerLock(lockers)
	for _, l := range lockers {
		l.close()
	}
	time.Sleep(10 * time.Millisecond) // the last notices
	stopSubs()
	subs.Wait()
	after := commandStats(e.addrs[:5])

	slices.SortFunc(events, func(a, b event) int { return a.t.Compare(b.t) })
	slices.SortFunc(notices, func(a, b time.Time) int { return a.Compare(b) })
	var handoffs, toNotice, rest []time.Duration
	unannounced := 0
	for i := 1; i < len(events); i++ {
		rel, got := events[i-1], events[i]
		if !rel.release || got.release || got.client == rel.client {
			continue
		}
		handoffs = append(handoffs, got.t.Sub(rel.t))
		j, _ := slices.BinarySearchFunc(notices, rel.t, func(a, b time.Time) int { return a.Compare(b) })
		if j == len(notices) || notices[j].After(got.t) {
			unannounced++
			continue
		}
		toNotice = append(toNotice, notices[j].Sub(rel.t))
		rest = append(rest, got.t.Sub(notices[j]))
	}
	var cmds []string
	total := 0
	for name, n := range after {
		if d := n - before[name]; d > 0 && name != "info" {
			total += d
			cmds = append(cmds, fmt.Sprintf("%s %.1f", name, float64(d)/float64(max(cycles, 1))))
		}
	}
	slices.Sort(cmds)
	return diagResult{
		rate:        float64(cycles) / elapsed.Seconds(),
		handoff:     percentile(handoffs, 0.5),
		notice:      percentile(toNotice, 0.5),
		rest:        percentile(rest, 0.5),
		rest90:      percentile(rest, 0.9),
		handoffs:    len(handoffs),
		unannounced: unannounced,
		attempts:    attempts,
		commands:    fmt.Sprintf("%.1f (%s)", float64(total)/float64(max(cycles, 1)), strings.Join(cmds, ", ")),
	}
}

// commandStats sums the calls of every command over the masters.
func commandStats(addrs []string) map[string]int {
	out := map[string]int{}
	for _, addr := range addrs {
		c, err := redigo.Dial("tcp", addr)
		if err != nil {
			panic(err)
		}
		info, err := redigo.String(c.Do("INFO", "commandstats"))
		c.Close()
		if err != nil {
			panic(err)
		}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
			n, _ := strconv.Atoi(calls)
			out[strings.TrimPrefix(name, "cmdstat_")] += n
		}
	}
	return out
}
