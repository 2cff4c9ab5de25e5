package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The turns cell: as many workers as the otel demo's first step, taking
// turns on one key on N=5, each holding it for turnsHold.
const (
	turnsWorkers = 6
	turnsHold    = 20 * time.Millisecond
	turnsN       = 5
)

var turnsCellName = fmt.Sprintf("%d workers, one key, N=%d, %d ms holds", turnsWorkers, turnsN, turnsHold.Milliseconds())

// turnsTargets are the turns cell's targets, quorumlock's default client:
// attempts per lock, the p99 wait against the FIFO bound, and no error in
// any library's row.
func turnsTargets() []target {
	p := "turns " + qlName
	ts := []target{
		{name: turnsCellName + ": attempts per lock ≤ 1.5", value: metric(p + " attempts"), goal: 1.5},
		{name: turnsCellName + ": p99 wait ÷ the FIFO bound ≤ 1.5", value: ratioOf(p+" p99", p+" fifo"), goal: 1.5},
		{name: turnsCellName + ": failed locks + unlocks, every library = 0", value: metric("turns errors"), goal: 0, count: true},
	}
	for i := range ts {
		ts[i].cell = turnsCellName
	}
	return ts
}

// turns: turnsWorkers clients (each with its own connections, as
// processes would have) loop on one key: lock, hold turnsHold, unlock.
// Served first come, first served, a worker that has just released waits
// for the others to hold it and hand it on in turn: the FIFO bound,
// (W−1) × (hold + handoff), from the cell's own p50 hold and handoff.
func turns(ctx context.Context, e *env) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Turns: %s\n\n", turnsCellName)
	fmt.Fprintf(&b, "%d clients, each with its own connections (as %d processes would have), loop on one key on N=%d for %v: lock (TTL %v), hold %d ms, unlock. "+
		"Served in turn (first come, first served), a worker that has just released waits for the other %d to hold the lock and hand it on: "+
		"the FIFO bound is (W−1) × (hold + handoff), from this cell's p50 hold (the sleep as slept) and p50 handoff to a waiter. "+
		"Attempts per lock are quorumlock's Acquire attempts (Lock.Attempts); errors are the row's failed lock and unlock calls.\n\n",
		turnsWorkers, turnsWorkers, turnsN, e.contentionCell, contentionTTL, turnsHold.Milliseconds(), turnsWorkers-1)
	b.WriteString("| library | cycles/s | p50 wait ms | p99 wait ms | p50 hold ms | p50 handoff ms | FIFO bound ms | p99 wait ÷ FIFO bound | self | Jain | attempts per lock | errors | per-client cycles |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	errs := 0
	for _, lb := range libs {
		if !lb.runs("turns") {
			continue
		}
		c := contend(ctx, e, lb, turnsN, turnsWorkers, turnsHold, fmt.Sprintf("bench:turns:%s", lb.name))
		if c == nil {
			continue
		}
		r := c.r
		errs += c.errors()
		hold, ho := percentile(r.holds, 0.5), percentile(r.handoffs, 0.5)
		bound := time.Duration(turnsWorkers-1) * (hold + ho)
		p := "turns " + lb.name
		e.metrics[p+" p99"] = float64(r.pct(0.99))
		e.metrics[p+" fifo"] = float64(bound)
		if c.attempts > 0 {
			e.metrics[p+" attempts"] = c.attempts
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %s | %s | %s | %.2f | %.0f%% | %.3f | %s | %d | %v |\n",
			lb.name, r.rate(), ms(r.pct(0.5)), ms(r.pct(0.99)), ms(hold), ms(ho), ms(bound), float64(r.pct(0.99))/float64(max(bound, 1)),
			100*c.selfShare(), r.jain(), c.attemptsShown(), c.errors(), r.perCli)
	}
	e.metrics["turns errors"] = float64(errs)
	b.WriteString("\n")
	b.WriteString(verdicts(e.metrics, turnsCellName))
	return b.String()
}
