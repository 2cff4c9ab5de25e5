package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/pool"
)

// report is what doctor found on one master.
type report struct {
	addr      string
	err       error // unreachable
	version   string
	role      string
	aof       string // appendonly, or "" when CONFIG is not permitted
	fsync     string
	policy    string
	configErr string
	rtt       time.Duration
	offset    time.Duration // master clock minus local clock, estimated
	problems  []string      // each makes the verdict FAIL
	warnings  []string
}

// redact removes the pool's credentials from what the master sent (a
// hostile master can echo them anywhere).
func (r *report) redact(p *pool.RedisPool) {
	r.err = p.RedactError(r.err)
	for _, s := range []*string{&r.version, &r.role, &r.aof, &r.fsync, &r.policy, &r.configErr} {
		*s = p.Redact(*s)
	}
	for _, list := range [][]string{r.problems, r.warnings} {
		for i := range list {
			list[i] = p.Redact(list[i])
		}
	}
}

func (r *report) verdict() string {
	switch {
	case r.err != nil:
		return "FAIL: unreachable: " + r.err.Error()
	case len(r.problems) > 0:
		return "FAIL: " + strings.Join(append(r.problems, r.warnings...), "; ")
	case len(r.warnings) > 0:
		return "WARN: " + strings.Join(r.warnings, "; ")
	}
	return "OK"
}

// cmdDoctor checks every master and prints a verdict line for each.
func cmdDoctor(ctx context.Context, e *env, args []string) int {
	if len(args) != 0 {
		fmt.Fprintln(e.stderr, "usage: redlock doctor")
		return exitUsage
	}
	code := exitOK
	for _, p := range e.pools {
		r := examine(ctx, p, e.timeout)
		r.redact(p)
		fmt.Fprintf(e.stdout, "%s\n", r.addr)
		if r.err == nil {
			fmt.Fprintf(e.stdout, "  version %s, role %s, round trip %v, clock offset %v\n",
				r.version, r.role, r.rtt.Round(time.Microsecond), r.offset.Round(time.Millisecond))
			if r.configErr != "" {
				fmt.Fprintf(e.stdout, "  persistence and eviction unknown: %s\n", r.configErr)
			} else {
				fmt.Fprintf(e.stdout, "  appendonly %s, appendfsync %s, maxmemory-policy %s\n", r.aof, r.fsync, r.policy)
			}
		}
		fmt.Fprintf(e.stdout, "  %s\n", r.verdict())
		if r.err != nil || len(r.problems) > 0 {
			code = exitFailure
		}
	}
	return code
}

func examine(ctx context.Context, p *pool.RedisPool, timeout time.Duration) *report {
	r := &report{addr: p.Addr()}
	ctx, cancel := context.WithTimeout(ctx, max(2*time.Second, 10*timeout))
	defer cancel()
	c, err := p.GetContext(ctx)
	if err != nil {
		r.err = err
		return r
	}
	defer c.Close()
	do := func(cmd string, args ...any) (any, error) { return redis.DoContext(c, ctx, cmd, args...) }

	// Round trip: the median of a few PINGs.
	var rtts []time.Duration
	for i := 0; i < 5; i++ {
		start := time.Now()
		if _, err := do("PING"); err != nil {
			r.err = err
			return r
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	r.rtt = rtts[len(rtts)/2]
	if r.rtt > timeout/2 {
		r.warnings = append(r.warnings, fmt.Sprintf("round trip %v is more than half the per-master timeout %v: raise --timeout (WithTimeout)",
			r.rtt.Round(time.Microsecond), timeout))
	}

	info, err := redis.String(do("INFO", "server"))
	if err == nil {
		r.version = infoField(info, "redis_version")
	}
	if info, err := redis.String(do("INFO", "replication")); err == nil {
		r.role = p.Redact(infoField(info, "role")) // before %q escapes a secret past redaction
	}
	if r.role != "master" {
		r.problems = append(r.problems, fmt.Sprintf("role is %q: a replica cannot be a lock master (writes fail, and a failover loses locks); point at a primary", r.role))
	}

	// Clock: TIME against the local clock, halfway through the call.
	before := time.Now()
	t, err := redis.Strings(do("TIME"))
	after := time.Now()
	if err == nil && len(t) == 2 {
		sec, _ := strconv.ParseInt(t[0], 10, 64)
		usec, _ := strconv.ParseInt(t[1], 10, 64)
		server := time.Unix(sec, usec*1000)
		r.offset = server.Sub(before.Add(after.Sub(before) / 2))
		if r.offset > time.Second || r.offset < -time.Second {
			r.warnings = append(r.warnings, fmt.Sprintf("clock is %v off the local clock: check NTP (Redlock needs clocks that run at the same rate; a step in a master's clock can expire locks early)",
				r.offset.Round(time.Millisecond)))
		}
	}

	cfg, err := redis.StringMap(do("CONFIG", "GET", "*"))
	if err != nil {
		r.configErr = err.Error()
		r.warnings = append(r.warnings, "CONFIG is not permitted: check by hand that appendonly is yes with appendfsync always, and maxmemory-policy is noeviction")
		return r
	}
	r.aof, r.fsync, r.policy = cfg["appendonly"], cfg["appendfsync"], cfg["maxmemory-policy"]
	switch {
	case r.aof != "yes":
		r.warnings = append(r.warnings, "no AOF: after a crash this master forgets its locks and fencing counters; set appendonly yes and appendfsync always, or keep a restarted master out for longer than the longest TTL")
	case r.fsync != "always":
		r.warnings = append(r.warnings, fmt.Sprintf("appendfsync %s: a crash can lose the last writes (locks, fencing counters); set appendfsync always", r.fsync))
	}
	if r.policy != "noeviction" {
		r.problems = append(r.problems, fmt.Sprintf("maxmemory-policy %s can evict held locks: set noeviction", r.policy))
	}
	return r
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "unknown"
}
