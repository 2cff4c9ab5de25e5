package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// roundTrip measures the single-command round trip to the first master
// from this process: one connection, one command at a time, written and
// its reply read, as the floor client does. It returns the p50 of PING
// and of SET NX PX, each sampled for a third of a cell (at most 20,000
// times).
func roundTrip(ctx context.Context, e *env) (ping, set time.Duration) {
	c, err := net.Dial("tcp", e.addrs[0])
	if err != nil {
		panic(err)
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	sample := func(cmd string) time.Duration {
		var lat []time.Duration
		end := time.Now().Add(e.duration / 3)
		for i := 0; i < 20_000 && time.Now().Before(end) && ctx.Err() == nil; i++ {
			t0 := time.Now()
			if _, err := c.Write([]byte(cmd)); err != nil {
				panic(err)
			}
			if _, err := rd.ReadString('\n'); err != nil {
				panic(err)
			}
			lat = append(lat, time.Since(t0))
		}
		return percentile(lat, 0.5)
	}
	ping = sample("*1\r\n$4\r\nPING\r\n")
	set = sample("*6\r\n$3\r\nSET\r\n$12\r\nbench:rtt:k1\r\n$5\r\ntoken\r\n$2\r\nNX\r\n$2\r\nPX\r\n$3\r\n100\r\n")
	return ping, set
}

// releaseScript is the usual compare-and-delete, as redis-benchmark sends
// it with EVAL.
const releaseScript = `if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end`

// ceiling: what the masters can take. redis-benchmark, pipelined (-P 16,
// 50 connections), one instance per master on the first five masters,
// all five at once: first SET NX PX on random keys, then EVAL of the
// release script. A lock+unlock cycle on N=5 costs every master one of
// each, so the masters' ceiling in cycles/s is 1 / (1/SET + 1/EVAL) with
// both rates per master.
func ceiling(ctx context.Context, e *env) string {
	var b strings.Builder
	b.WriteString("## Ceiling: what five masters take\n\n")
	path, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.WriteString("Not measured: redis-benchmark is not installed (Debian's redis-tools; `make bench-peers` installs it).\n\n")
		return b.String()
	}
	fmt.Fprintf(&b, "`redis-benchmark -P 16 -c 50 -n %d -r 100000000` against each of the first five masters, five instances at once "+
		"(they share this machine's cores with the masters): SET NX PX, then EVAL of a compare-and-delete script. "+
		"A lock+unlock cycle on N=5 is one SET and one EVAL on every master, so the ceiling is 1 / (1/SET + 1/EVAL) cycles/s, "+
		"from the mean rate per master that redis-benchmark reports. It is measured here and again right after the 64-client N=5 cells; "+
		"the targets take the higher of the two (a capacity, which other programs on the machine can only lower).\n\n", ceilingRequests(e))
	b.WriteString("CPU per command is the masters' own (INFO cpu) and the five redis-benchmark processes' (their rusage), over all the commands they ran.\n\n")
	b.WriteString(ceilingHeader)
	rows, cycles, err := measureCeiling(ctx, e, path)
	b.WriteString(rows)
	if err != nil {
		return b.String()
	}
	e.metrics["ceiling cycles"] = cycles
	fmt.Fprintf(&b, "\nCeiling on N=5: **%.0f lock+unlock cycles/s**.\n\n", cycles)
	return b.String()
}

const ceilingHeader = "| command | per master, mean (redis-benchmark) | per master, from the wall clock of all five | slowest master | masters' CPU µs/command | redis-benchmark CPU µs/command |\n|---|---|---|---|---|---|\n"

func ceilingRequests(e *env) int { return int(max(20_000, 40_000*e.duration.Seconds())) }

// ceilingAgain measures the ceiling once more (when it was measured
// before in this run) and keeps the higher figure.
func ceilingAgain(ctx context.Context, e *env) string {
	first, ok := e.metrics["ceiling cycles"]
	path, err := exec.LookPath("redis-benchmark")
	if !ok || err != nil {
		return ""
	}
	rows, cycles, err := measureCeiling(ctx, e, path)
	if err != nil {
		return "The ceiling measured again: " + strings.TrimSpace(rows) + "\n\n"
	}
	e.metrics["ceiling cycles"] = max(first, cycles)
	return fmt.Sprintf("The masters' ceiling measured again right after the N=5 cells: %.0f cycles/s (before them: %.0f); the targets use %.0f.\n\n%s%s\n",
		cycles, first, max(first, cycles), ceilingHeader, rows)
}

// measureCeiling runs redis-benchmark for SET NX PX and EVAL on the
// first five masters and returns the table rows and the ceiling.
func measureCeiling(ctx context.Context, e *env, path string) (string, float64, error) {
	var b strings.Builder
	requests := ceilingRequests(e)
	key := "bench:ceiling:__rand_int__"
	cmds := []struct {
		label string
		args  []string
	}{
		{"SET NX PX", []string{"SET", key, "tok", "NX", "PX", "10000"}},
		{"EVAL (release)", []string{"EVAL", releaseScript, "1", key, "tok"}},
	}
	var rates []float64
	for _, c := range cmds {
		mcpu0 := mastersCPU(e.addrs[:5])
		mean, wall, slowest, bcpu, err := benchTogether(ctx, path, e.addrs[:5], requests, c.args)
		if err != nil {
			fmt.Fprintf(&b, "| %s | failed: %v | | | | |\n", c.label, err)
			return b.String(), 0, err
		}
		mcpu := mastersCPU(e.addrs[:5]) - mcpu0
		rates = append(rates, mean)
		perCmd := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(5*requests) }
		fmt.Fprintf(&b, "| %s | %.0f/s | %.0f/s | %.0f/s | %.1f | %.1f |\n", c.label, mean, wall, slowest, perCmd(mcpu), perCmd(bcpu))
	}
	e.metrics["ceiling set"] = rates[0]
	e.metrics["ceiling eval"] = rates[1]
	return b.String(), 1 / (1/rates[0] + 1/rates[1]), nil
}

// benchTogether runs one redis-benchmark per address at once and returns
// the mean of the rates they report, the rate per master from the wall
// clock of the whole run, and the lowest reported rate.
func benchTogether(ctx context.Context, path string, addrs []string, requests int, args []string) (mean, wall, slowest float64, cpu time.Duration, err error) {
	rates := make([]float64, len(addrs))
	cpus := make([]time.Duration, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	start := time.Now()
	for i, addr := range addrs {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return 0, 0, 0, 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, path, append([]string{"-h", host, "-p", port, "-P", "16", "-c", "50",
				"-n", strconv.Itoa(requests), "-r", "100000000", "-q", "--csv"}, args...)...)
			out, err := cmd.Output()
			if err != nil {
				errs[i] = fmt.Errorf("redis-benchmark on %s: %w", addr, err)
				return
			}
			cpus[i] = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			rates[i], errs[i] = parseBenchCSV(out)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return 0, 0, 0, 0, err
		}
	}
	slowest = rates[0]
	for i, r := range rates {
		mean += r / float64(len(rates))
		slowest = min(slowest, r)
		cpu += cpus[i]
	}
	return mean, float64(requests) / elapsed.Seconds(), slowest, cpu, nil
}

// parseBenchCSV reads the rps column of redis-benchmark's --csv output:
// a header line, then one line per test.
func parseBenchCSV(out []byte) (float64, error) {
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark output: %w", err)
	}
	if len(recs) < 2 || len(recs[1]) < 2 || recs[0][1] != "rps" {
		return 0, fmt.Errorf("redis-benchmark output: unexpected %q", out)
	}
	return strconv.ParseFloat(recs[1][1], 64)
}
