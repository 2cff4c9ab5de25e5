package main

import (
	"fmt"
	"strings"
	"time"
)

// target is one of the performance targets, judged on this run's figures.
type target struct {
	name string
	// value returns the figure (mostly a ratio) and whether it was
	// measured.
	value func(m map[string]float64) (float64, bool)
	goal  float64
	// atLeast: the value must be at least goal; otherwise at most.
	atLeast bool
	// info marks context for the targets, not a target.
	info bool
	// count: the value is a count, printed as an integer.
	count bool
	// inconclusive, when set, tells why this run cannot judge the
	// target ("" when it can).
	inconclusive func(m map[string]float64) string
	// cell, when set, names the cell of a workload the target judges (the
	// name starts with it): that cell prints its verdict on all its
	// targets (cellVerdict).
	cell string
}

// probeBound is the probe PING p99 above which a loaded cell cannot judge
// failures: half the per-master timeout (50 ms). When a bare PING from a
// connection of its own takes that long, the machine, not the client,
// delays the masters' answers past the timeout.
const probeBound = 25 * time.Millisecond

// ratioOf is m[a] ÷ m[b], measured when both are.
func ratioOf(a, b string) func(map[string]float64) (float64, bool) {
	return func(m map[string]float64) (float64, bool) {
		x, xok := m[a]
		y, yok := m[b]
		if !xok || !yok || x == 0 || y == 0 {
			return 0, false
		}
		return x / y, true
	}
}

// sumOf is m[a] + m[b] + ..., measured when all are.
func sumOf(keys ...string) func(map[string]float64) (float64, bool) {
	return func(m map[string]float64) (float64, bool) {
		s := 0.0
		for _, k := range keys {
			v, ok := m[k]
			if !ok {
				return 0, false
			}
			s += v
		}
		return s, true
	}
}

// targets lists the performance targets for each way quorumlock reaches the
// masters: addresses (NewFromAddrs-like pools), the user's own
// *redis.Pool, and the go-redis adapter (not measured until its slot in
// lockers.go is filled); the pooled path is judged where a second
// transport must not fail.
func targets() []target {
	var ts []target
	for _, ql := range []string{qlName, qlOwnPoolName} {
		ts = append(ts,
			target{name: fmt.Sprintf("64 clients, N=5, cycles/s: %s ÷ go-redsync ≥ 3", ql), value: ratioOf("par5 "+ql+" rate", "par5 "+rsName+" rate"), goal: 3, atLeast: true},
			target{name: fmt.Sprintf("one client, N=1, p50: %s ÷ bsm/redislock ≤ 1.1", ql), value: ratioOf("seq1 "+ql+" p50", "seq1 "+rlName+" p50"), goal: 1.1},
			target{name: fmt.Sprintf("one client, N=5, p50: %s ÷ floor ≤ 1.0", ql), value: ratioOf("seq5 "+ql+" p50", "seq5 "+floorName+" p50"), goal: 1.0},
			target{name: fmt.Sprintf("64 clients, N=5, cycles/s: %s ÷ the masters' ceiling ≥ 0.6", ql), value: ratioOf("par5 "+ql+" rate", "ceiling cycles"), goal: 0.6, atLeast: true},
			target{name: fmt.Sprintf("allocations per lock+unlock, N=5: %s ÷ go-redsync ≤ 1/3", ql), value: ratioOf("allocs "+ql, "allocs "+rsName), goal: 1.0 / 3},
		)
	}
	ts = append(ts,
		target{name: "go-redis adapter: 64 clients, N=5, cycles/s ÷ go-redsync on go-redis ≥ 2", value: ratioOf("par5 "+qlGoRedisName+" rate", "par5 "+rsGoRedisName+" rate"), goal: 2, atLeast: true},
		target{name: "go-redis adapter: one client, N=1, p50 ÷ bsm/redislock ≤ 1.1", value: ratioOf("seq1 "+qlGoRedisName+" p50", "seq1 "+rlName+" p50"), goal: 1.1},
	)
	// go-redsync's valkey-go adapter cannot be built here (valkeycompat is
	// not on the module proxy): the valkey-go adapter is judged beside
	// go-redsync on rueidis, which valkey-go forked.
	for _, a := range []struct{ client, ours, peer, peerClient string }{
		{"rueidis", qlRueidisName, rsRueidisName, "rueidis"},
		{"valkey-go", qlValkeyName, rsRueidisName, "rueidis"},
	} {
		ts = append(ts,
			target{name: fmt.Sprintf("%s adapter: 64 clients, N=5, cycles/s ÷ quorumlock's pipelined redigo path ≥ 0.85", a.client), value: ratioOf("par5 "+a.ours+" rate", "par5 "+qlName+" rate"), goal: 0.85, atLeast: true},
			target{name: fmt.Sprintf("%s adapter: 64 clients, N=5, cycles/s ÷ go-redsync on %s ≥ 1.5", a.client, a.peerClient), value: ratioOf("par5 "+a.ours+" rate", "par5 "+a.peer+" rate"), goal: 1.5, atLeast: true},
			target{name: fmt.Sprintf("%s adapter: one client, N=1, p50 ÷ bsm/redislock ≤ 1.1", a.client), value: ratioOf("seq1 "+a.ours+" p50", "seq1 "+rlName+" p50"), goal: 1.1},
		)
	}
	for _, n := range contentionNs {
		for _, hold := range contentionHolds {
			ts = append(ts, contentionTargets(n, hold)...)
		}
	}
	ts = append(ts, turnsTargets()...)
	ts = append(ts,
		target{name: expiryCellName + ": the waiter holds it, p50 ms after it expired on a quorum ≤ 50", cell: expiryCellName, value: func(m map[string]float64) (float64, bool) {
			v, ok := m["expiry5 "+qlName+" p50"]
			return v / float64(time.Millisecond), ok
		}, goal: 50},
	)
	for _, ql := range []string{qlName, qlPooledName, qlOwnPoolName, qlGoRedisName} {
		p := "busy " + ql
		ts = append(ts, target{name: fmt.Sprintf("64 clients, N=5, busy loop per core, %s: failed acquisitions + unconfirmed releases = 0", ql),
			value: sumOf(p+" failed", p+" unconfirmed"), goal: 0, count: true,
			inconclusive: func(m map[string]float64) string {
				if probe := time.Duration(m[p+" probe p99"]); probe > probeBound {
					return fmt.Sprintf("inconclusive: the probe's PING p99 was %s ms (> %v), the machine is overloaded", ms(probe), probeBound)
				}
				return ""
			}})
	}
	for _, load := range []string{"quiet", "busy"} {
		for _, ql := range []string{qlName, qlPooledName, qlOwnPoolName, qlGoRedisName} {
			p := fmt.Sprintf("fresh-%s %s", load, ql)
			ts = append(ts, target{name: fmt.Sprintf("64 clients on fresh keys, N=5, %s CPUs, %s: failed acquisitions + releases = 0", load, ql),
				value: sumOf(p + " errors"), goal: 0, count: true})
		}
	}
	ts = append(ts, target{name: "every quorumlock cell of this run (see Errors): failed locks + unlocks = 0",
		value: sumOf("errors " + qlName), goal: 0, count: true})
	// With 2 of 5 hung: each path's p99 over its own healthy p99 under
	// the same CPU load, the better path's.
	for _, load := range []string{"quiet", "busy"} {
		for _, c := range []struct{ when, tag string }{{"whole cell", "hung2"}, {"from ⅓ of the cell", "hung2mid"}} {
			ts = append(ts, target{name: fmt.Sprintf("2 of 5 hung (%s, %s CPUs), p99: quorumlock's ÷ its healthy p99 ≤ 2", c.when, load), goal: 2,
				value: func(m map[string]float64) (float64, bool) {
					best := 0.0
					for _, ql := range []string{qlName, qlPooledName} {
						h, d := m[fmt.Sprintf("deg-%s-healthy %s p99", load, ql)], m[fmt.Sprintf("deg-%s-%s %s p99", load, c.tag, ql)]
						if h != 0 && d != 0 && (best == 0 || d/h < best) {
							best = d / h
						}
					}
					return best, best != 0
				}})
		}
	}
	ts = append(ts,
		target{name: "(context) the masters' ceiling on N=5, cycles/s", info: true, count: true, value: func(m map[string]float64) (float64, bool) {
			v, ok := m["ceiling cycles"]
			return v, ok
		}},
		target{name: "(context) single-command round trip (PING), µs", info: true, value: func(m map[string]float64) (float64, bool) {
			v, ok := m["rtt"]
			return v / 1e3, ok
		}},
		target{name: "(context) one client, N=5, p50: floor ÷ go-redsync", info: true, value: ratioOf("seq5 "+floorName+" p50", "seq5 "+rsName+" p50")},
		target{name: "(context) 64 clients, N=5, cycles/s: pooled path ÷ go-redsync", info: true, value: ratioOf("par5 "+qlPooledName+" rate", "par5 "+rsName+" rate")},
	)
	return ts
}

// metric is m[key], measured when present.
func metric(key string) func(map[string]float64) (float64, bool) {
	return func(m map[string]float64) (float64, bool) {
		v, ok := m[key]
		return v, ok
	}
}

// judge returns t's figure as shown and its verdict on m: "met", "not
// met", why it is inconclusive, or "–" for context; measured is false
// when the figure is missing.
func judge(t target, m map[string]float64) (shown, verdict string, measured bool) {
	v, ok := t.value(m)
	if !ok {
		return "not measured", "–", false
	}
	shown = fmt.Sprintf("%.2f", v)
	if t.count {
		shown = fmt.Sprintf("%.0f", v)
	}
	if t.info {
		return shown, "–", true
	}
	met := v <= t.goal
	if t.atLeast {
		met = v >= t.goal
	}
	verdict = "not met"
	if met {
		verdict = "met"
	}
	if t.inconclusive != nil {
		if why := t.inconclusive(m); why != "" {
			verdict = why
		}
	}
	return shown, verdict, true
}

// cellVerdict judges the cell named cell on all its targets: "met" when
// every one is, else "not met" (or "not measured") naming the figures
// that were not; each figure as "goal: value".
func cellVerdict(cell string, m map[string]float64) (verdict, figures string) {
	var all, missed []string
	measured := true
	for _, t := range targets() {
		if t.cell != cell {
			continue
		}
		shown, v, ok := judge(t, m)
		goal := strings.TrimPrefix(t.name, cell+": ")
		all = append(all, goal+": "+shown)
		if !ok {
			measured = false
		} else if v != "met" {
			missed = append(missed, goal)
		}
	}
	switch {
	case len(all) == 0:
		return "no target", ""
	case len(missed) > 0:
		return "not met (" + strings.Join(missed, "; ") + ")", strings.Join(all, "; ")
	case !measured:
		return "not measured", strings.Join(all, "; ")
	}
	return "met", strings.Join(all, "; ")
}

// targetsSection judges this run's figures against the targets.
func targetsSection(m map[string]float64) string {
	var b strings.Builder
	b.WriteString("## Targets\n\nThe performance targets, judged on the figures of this run (ratios of cells measured side by side).\n\n" +
		"| target | this run | met |\n|---|---|---|\n")
	for _, t := range targets() {
		shown, verdict, _ := judge(t, m)
		fmt.Fprintf(&b, "| %s | %s | %s |\n", t.name, shown, verdict)
	}
	b.WriteString("\n")
	return b.String()
}
