package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// contentionNs and contentionHolds are the cells of the contention table
// (handoff): 8 clients on one key, on N masters, holding each lock that
// long.
var (
	contentionNs    = []int{1, 3, 5}
	contentionHolds = []time.Duration{0, time.Millisecond}
)

// contentionCellName names the contention cell on n masters with hold,
// as its targets and its verdict do.
func contentionCellName(n int, hold time.Duration) string {
	if hold == 0 {
		return fmt.Sprintf("8 clients, one key, N=%d, no hold", n)
	}
	return fmt.Sprintf("8 clients, one key, N=%d, %d ms hold", n, hold.Milliseconds())
}

// contentionPrefix is the prefix of the contention cell's metrics.
func contentionPrefix(n int, hold time.Duration) string { return fmt.Sprintf("handoff%d-%v ", n, hold) }

// contentionTargets are the targets of the contention cell on n masters
// with hold, quorumlock's default client beside go-redsync: on N=5,
// cycles/s, the p99 of a whole cycle, the wait, fairness, handoff and
// attempts; at every N, no error in any library's row of the cell. The
// N=1 and N=3 rows show their ratios without a goal of their own.
func contentionTargets(n int, hold time.Duration) []target {
	cell, p := contentionCellName(n, hold), contentionPrefix(n, hold)
	rate, cycle := 1.0, 0.5
	if hold > 0 {
		rate, cycle = 1.1, 0.25
	}
	var ts []target
	if n == 5 {
		ts = append(ts, target{name: fmt.Sprintf("%s: cycles/s ÷ go-redsync's ≥ %.1f", cell, rate), value: ratioOf(p+qlName+" rate", p+rsName+" rate"), goal: rate, atLeast: true})
	}
	if n == 5 && hold == 0 {
		ts = append(ts,
			target{name: cell + ": p99 wait ÷ go-redsync's ≤ 0.2", value: ratioOf(p+qlName+" p99", p+rsName+" p99"), goal: 0.2},
			target{name: cell + ": Jain's index ≥ 0.95", value: metric(p + qlName + " jain"), goal: 0.95, atLeast: true},
			target{name: cell + ": p50 handoff to a waiter ÷ the RTT ≤ 3", value: ratioOf(p+qlName+" handoff", "rtt"), goal: 3},
		)
	}
	if n == 5 {
		ts = append(ts, target{name: fmt.Sprintf("%s: p99 cycle ÷ go-redsync's ≤ %v", cell, cycle), value: ratioOf(p+qlName+" p99 cycle", p+rsName+" p99 cycle"), goal: cycle})
	}
	if n == 5 && hold > 0 {
		ts = append(ts, target{name: cell + ": attempts per lock ≤ 1.5", value: metric(p + qlName + " attempts"), goal: 1.5})
	}
	ts = append(ts, target{name: cell + ": failed locks + unlocks, every library = 0", value: metric(p + "errors"), goal: 0, count: true})
	for i := range ts {
		ts[i].cell = cell
	}
	return ts
}

// contended is one library's row of a cell where clients share one key.
type contended struct {
	r *result
	// attempts is quorumlock's Acquire attempts per lock (0 for the
	// peers, which do not count them).
	attempts float64
}

func (c *contended) errors() int { return c.r.acqFailures + c.r.relFailures }

// selfShare is the share of locks that went to the client that released
// last.
func (c *contended) selfShare() float64 {
	if c.r.cycles == 0 {
		return 0
	}
	return float64(c.r.self) / float64(c.r.cycles)
}

func (c *contended) attemptsShown() string {
	if c.attempts == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", c.attempts)
}

// contentionTTL is the TTL of the locks in the cells where clients
// contend for one key (the contention table and the turns cell).
const contentionTTL = 8 * time.Second

// contend runs clients clients of lb (each a client of its own) on key,
// on n masters, with locks of contentionTTL held for hold, for
// e.contentionCell, timing the waits; nil when lb cannot run on n
// masters.
func contend(ctx context.Context, e *env, lb lib, n, clients int, hold time.Duration, key string) *contended {
	lockers := make([]locker, clients)
	for i := range lockers {
		lockers[i] = lb.make(e, n)
		if lockers[i] == nil {
			return nil
		}
		if s, ok := lockers[i].(ttlSetter); ok {
			s.setTTL(contentionTTL)
		}
	}
	ce := *e
	ce.duration = e.contentionCell
	r := run(ctx, &ce, lockers, key, hold, 0, true)
	c := &contended{r: r, attempts: attemptsPerLock(lockers)}
	for _, l := range lockers {
		l.close()
	}
	return c
}

// verdicts is the verdict of each cell named, on all its targets, as a
// table.
func verdicts(m map[string]float64, cells ...string) string {
	var b strings.Builder
	b.WriteString("Verdicts: quorumlock's default client judged on each cell's targets, with this run's figures; the cell is met when every one is.\n\n" +
		"| cell | targets: this run | verdict |\n|---|---|---|\n")
	for _, cell := range cells {
		verdict, figures := cellVerdict(cell, m)
		fmt.Fprintf(&b, "| %s | %s | %s |\n", cell, figures, verdict)
	}
	b.WriteString("\n")
	return b.String()
}
