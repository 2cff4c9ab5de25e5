package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// result is what one library did in one cell of a workload.
type result struct {
	cycles   int
	elapsed  time.Duration
	lat      []time.Duration // per cycle (sequential) or per wait (handoff)
	perCli   []int
	failures int
	handoffs []time.Duration // from a release's start to the next lock's return
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

// run drives one goroutine per locker (each a client of its own, as
// separate processes would be), each locking key (or its own key when
// ownKeys), holding for hold, until the duration is spent. It records the
// wait for each lock (from the call to its return) when wait is true, else
// the whole lock+unlock cycle.
func run(ctx context.Context, e *env, lockers []locker, key string, hold time.Duration, ownKeys, wait bool) *result {
	clients := len(lockers)
	ctx, cancel := context.WithTimeout(ctx, e.duration)
	defer cancel()
	res := &result{perCli: make([]int, clients)}
	var mu sync.Mutex
	var lastRelease atomic.Int64 // unix nanos of the latest release's start
	var wg sync.WaitGroup
	start := time.Now()
	for id := 0; id < clients; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := key
			if ownKeys {
				k = fmt.Sprintf("%s:%d", key, id)
			}
			var lat, hos []time.Duration
			n, fails := 0, 0
			for ctx.Err() == nil {
				t0 := time.Now()
				unlock, err := lockers[id].lock(ctx, k)
				if err != nil {
					if ctx.Err() == nil {
						fails++
					}
					continue
				}
				got := time.Now()
				waited := got.Sub(t0)
				var handoff time.Duration
				if rel := lastRelease.Load(); rel != 0 {
					handoff = got.Sub(time.Unix(0, rel))
				}
				if hold > 0 {
					time.Sleep(hold)
				}
				lastRelease.Store(time.Now().UnixNano())
				if err := unlock(context.Background()); err != nil {
					fails++
				}
				if wait {
					lat = append(lat, waited)
					if handoff > 0 {
						hos = append(hos, handoff)
					}
				} else {
					lat = append(lat, time.Since(t0))
				}
				n++
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			res.handoffs = append(res.handoffs, hos...)
			res.perCli[id] = n
			res.cycles += n
			res.failures += fails
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
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
	b.WriteString("| N | library | cycles/s | p50 ms | p99 ms | quorumlock's p50 advantage |\n|---|---|---|---|---|---|\n")
	for _, n := range []int{1, 3, 5, 7} {
		var ours *result
		for _, lb := range libs {
			if lb.handoffOnly {
				continue
			}
			l := lb.make(e, n)
			if l == nil {
				continue
			}
			r := run(ctx, e, []locker{l}, fmt.Sprintf("bench:seq:%s:%d", lb.name, n), 0, true, false)
			l.close()
			adv := "—"
			if ours == nil {
				ours = r
			} else {
				adv = ratio(float64(ours.pct(0.5)), float64(r.pct(0.5)), false)
			}
			fmt.Fprintf(&b, "| %d | %s | %.0f | %s | %s | %s |\n", n, lb.name, r.rate(), ms(r.pct(0.5)), ms(r.pct(0.99)), adv)
		}
	}
	b.WriteString("\n")
	return b.String()
}

// handoff: 8 clients on one key; how fast the lock passes from one holder
// to the next, and how evenly.
func handoff(ctx context.Context, e *env) string {
	var b strings.Builder
	b.WriteString("## Handoff: 8 clients on one key\n\n")
	b.WriteString("Eight clients, each with its own connections (as eight processes would have), loop: lock, hold, unlock. The wait is from the call to lock to its return. " +
		"Jain's index of the per-client completion counts is 1 when every client got the lock equally often.\n\n")
	b.WriteString("The handoff is the time from a holder starting its release to the next lock being returned, to whichever client.\n\n")
	b.WriteString("| N | hold | library | cycles/s | p50 wait ms | p99 wait ms | p50 handoff ms | Jain | per-client cycles | plain quorumlock's cycles/s advantage |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range []int{1, 5} {
		for _, hold := range []time.Duration{0, time.Millisecond} {
			var ours *result
			for _, lb := range libs {
				lockers := make([]locker, 8)
				for i := range lockers {
					lockers[i] = lb.make(e, n)
				}
				if lockers[0] == nil {
					continue
				}
				r := run(ctx, e, lockers, fmt.Sprintf("bench:handoff:%s:%d:%v", lb.name, n, hold), hold, false, true)
				for _, l := range lockers {
					l.close()
				}
				adv := "—"
				switch {
				case ours == nil:
					ours = r
				case !strings.HasPrefix(lb.name, "quorumlock"):
					adv = ratio(ours.rate(), r.rate(), true)
				}
				fmt.Fprintf(&b, "| %d | %v | %s | %.0f | %s | %s | %s | %.3f | %v | %s |\n",
					n, hold, lb.name, r.rate(), ms(r.pct(0.5)), ms(r.pct(0.99)), ms(percentile(r.handoffs, 0.5)), r.jain(), r.perCli, adv)
			}
		}
	}
	b.WriteString("\n")
	return b.String()
}

// parallel: 64 goroutines of one application, each locking its own key,
// through one instance of the library.
func parallel(ctx context.Context, e *env) string {
	var b strings.Builder
	b.WriteString("## 64 clients on their own keys\n\n")
	b.WriteString("64 goroutines share one instance of each library (one application), each looping lock+unlock on a key of its own.\n\n")
	b.WriteString("| N | library | cycles/s | p50 ms | p99 ms | plain quorumlock's cycles/s advantage | pipelined quorumlock's cycles/s advantage |\n|---|---|---|---|---|---|---|\n")
	for _, n := range []int{1, 5} {
		var plain, piped *result
		for _, lb := range libs {
			if lb.handoffOnly {
				continue
			}
			l := lb.make(e, n)
			if l == nil {
				continue
			}
			lockers := make([]locker, 64)
			for i := range lockers {
				lockers[i] = l
			}
			r := run(ctx, e, lockers, fmt.Sprintf("bench:par:%s:%d", lb.name, n), 0, true, false)
			l.close()
			adv1, adv2 := "—", "—"
			switch lb.name {
			case "quorumlock":
				plain = r
			case "quorumlock (pipelined)":
				piped = r
			default:
				adv1 = ratio(plain.rate(), r.rate(), true)
				adv2 = ratio(piped.rate(), r.rate(), true)
			}
			fmt.Fprintf(&b, "| %d | %s | %.0f | %s | %s | %s | %s |\n", n, lb.name, r.rate(), ms(r.pct(0.5)), ms(r.pct(0.99)), adv1, adv2)
		}
	}
	b.WriteString("\n")
	return b.String()
}
