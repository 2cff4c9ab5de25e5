package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	redigo "github.com/gomodule/redigo/redis"
)

// expiryRuns is how many times the expiry workload lets a lock expire per
// library and N; the target is judged on the median.
const expiryRuns = 20

// expiryCellName names the expiry cell the target judges.
const expiryCellName = "a lock left to expire, N=5"

// expiryTTL is the vanished holder's TTL: its key is set directly on the
// masters, as a holder that crashed right after its acquisition left it.
const expiryTTL = 500 * time.Millisecond

// expiry measures how soon a waiter takes a lock whose holder vanished:
// its key is set on every master with expiryTTL and never released, so no
// notice wakes anyone. The waiter's Acquire starts right after the SETs;
// the figure is from the moment the key has expired on a quorum of
// masters (the quorum-th soonest of each master's SET reply + the TTL) to
// the waiter's lock returning.
func expiry(ctx context.Context, e *env) string {
	var b strings.Builder
	b.WriteString("## A lock left to expire\n\n")
	fmt.Fprintf(&b, "A holder that vanished: its key is set on every master with a TTL of %v and never released (no notice). "+
		"One waiter (a client of its own, started before the key expires) waits for it; the figure is from the moment the key had expired on a quorum of masters "+
		"to the waiter's lock returning, over %d runs per cell.\n\n", expiryTTL, expiryRuns)
	b.WriteString("| N | library | p50 ms | p90 ms | max ms |\n|---|---|---|---|---|\n")
	ns := []int{1, 3, 5}
	if e.quick {
		ns = []int{5}
	}
	for _, n := range ns {
		for _, lb := range libs {
			if !lb.runs("expiry") {
				continue
			}
			late, err := expiryCell(ctx, e, lb, n)
			if err != nil {
				e.errs.note(fmt.Sprintf("expiry N=%d %s", n, lb.name), &result{acqFailures: 1, samples: []string{err.Error()}})
				fmt.Fprintf(&b, "| %d | %s | error: %v | | |\n", n, lb.name, err)
				continue
			}
			e.metrics[fmt.Sprintf("expiry%d %s p50", n, lb.name)] = float64(percentile(late, 0.5))
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", n, lb.name, ms(percentile(late, 0.5)), ms(percentile(late, 0.9)), ms(slices.Max(late)))
		}
	}
	b.WriteString("\n")
	b.WriteString(verdicts(e.metrics, expiryCellName))
	return b.String()
}

// expiryCell runs the expiry workload's runs for one library on n masters.
func expiryCell(ctx context.Context, e *env, lb lib, n int) ([]time.Duration, error) {
	conns := make([]redigo.Conn, n)
	for i := range conns {
		c, err := redigo.Dial("tcp", e.addrs[i])
		if err != nil {
			return nil, err
		}
		defer c.Close()
		conns[i] = c
	}
	quorum := n/2 + 1
	var late []time.Duration
	for run := range expiryRuns {
		l := lb.make(e, n)
		key := fmt.Sprintf("bench:expiry:%s:%d:%d:%d", lb.name, n, run, time.Now().UnixNano())
		// Warm the client up on another key first, so that the run
		// measures the waiting, not the first connection.
		if unlock, err := l.lock(ctx, key+":warm"); err == nil {
			_ = unlock(ctx)
		}
		free := make([]time.Time, n)
		for i, c := range conns {
			if _, err := c.Do("SET", key, "vanished", "PX", expiryTTL.Milliseconds()); err != nil {
				l.close()
				return nil, err
			}
			free[i] = time.Now().Add(expiryTTL)
		}
		slices.SortFunc(free, func(a, b time.Time) int { return a.Compare(b) })
		cctx, cancel := context.WithTimeout(ctx, 10*expiryTTL+5*time.Second)
		unlock, err := l.lock(cctx, key)
		got := time.Now()
		cancel()
		if err != nil {
			l.close()
			return nil, err
		}
		_ = unlock(ctx)
		l.close()
		late = append(late, max(got.Sub(free[quorum-1]), 0))
	}
	return late, nil
}
