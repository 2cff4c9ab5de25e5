package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	qlredigo "github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// freshTTL is the fresh workload's lock TTL.
const freshTTL = 8 * time.Second

// freshBusyLoops is how many busy loops run beside the fresh workload's
// loaded cells.
const freshBusyLoops = 2

// fresh: 64 goroutines share one instance on N=5, each looping Acquire
// (TTL 8 s) → Release on a key of its own never used before, with every
// master up; quiet, then with two busy loops beside it; on each of
// quorumlock's ways to reach the masters (the default is a Client built
// from addresses). Acquire waits, so an attempt that fails is retried
// inside it; every Acquire or Release that returns an error is counted.
// Every master is up: the target is 0.
func fresh(ctx context.Context, e *env) string {
	var b strings.Builder
	b.WriteString("## 64 clients on fresh keys, N=5, quiet and with two busy loops\n\n")
	fmt.Fprintf(&b, "64 goroutines share one instance, each looping Acquire (TTL %v, waiting) + Release on a key of its own that no cycle used before, for %v per cell, every master up. "+
		"The loaded cells run %d spinning processes beside them. An Acquire or Release that returns an error is the client failing with every master up.\n\n", freshTTL, e.freshCell, freshBusyLoops)
	b.WriteString("| CPUs | library | cycles/s | p50 ms | p99 ms | failed acquisitions | failed releases | probe PING p99 / worst ms | 1 ms timer late p99 / worst ms |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, load := range []string{"quiet", "busy"} {
		var bz *busy
		if load == "busy" {
			var err error
			if bz, err = startBusy(freshBusyLoops); err != nil {
				panic(err)
			}
		}
		for _, lb := range libs {
			if !lb.runs("fresh") {
				continue
			}
			var l locker
			switch lb.name {
			case qlName:
				l = newQuorumlockAddrs(e, 5)
			case qlPooledName:
				l = newQuorumlockAddrs(e, 5, qlredigo.WithPipelining(false))
			default:
				l = lb.make(e, 5)
			}
			if l == nil {
				continue
			}
			q := l.(*qlLocker)
			q.opts = []redlock.LockOption{redlock.WithTTL(freshTTL), redlock.WithWait(time.Hour)}
			lockers := make([]locker, 64)
			for i := range lockers {
				lockers[i] = l
			}
			fe := *e
			fe.duration = e.freshCell
			pr := startProbes(e.addrs[0])
			r := run(ctx, &fe, lockers, fmt.Sprintf("bench:fresh-%s:%s", load, lb.name), 0, freshKeys, false)
			ping, late := pr.stop()
			l.close()
			prefix := fmt.Sprintf("fresh-%s %s", load, lb.name)
			e.metrics[prefix+" errors"] = float64(r.acqFailures + r.relFailures)
			e.metrics[prefix+" rate"] = r.rate()
			fmt.Fprintf(&b, "| %s | %s | %.0f | %s | %s | %d | %d | %s / %s | %s / %s |\n", load, lb.name, r.rate(), ms(r.pct(0.5)), ms(r.pct(0.99)), r.acqFailures, r.relFailures,
				ms(percentile(ping, 0.99)), ms(percentile(ping, 1)), ms(percentile(late, 0.99)), ms(percentile(late, 1)))
			if len(r.samples) > 0 {
				fmt.Fprintf(&b, "| | first errors: %s | | | | | | | |\n", strings.ReplaceAll(strings.Join(r.samples, "<br>"), "|", "\\|"))
			}
		}
		bz.stop()
	}
	b.WriteString("\n")
	return b.String()
}
