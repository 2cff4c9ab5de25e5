package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/pool"
)

// report is what doctor found on one master. Its JSON form is the
// "masters" element of doctor --json (docs/operations.md): keep the names
// stable.
type report struct {
	Addr        string   `json:"address"`
	Reachable   bool     `json:"reachable"`
	Error       string   `json:"error,omitempty"` // why it could not be examined
	Version     string   `json:"version,omitempty"`
	Role        string   `json:"role,omitempty"`
	RunID       string   `json:"run_id,omitempty"`
	RoundTripUS int64    `json:"round_trip_us"`
	ClockOffMS  int64    `json:"clock_offset_ms"`
	AppendOnly  string   `json:"appendonly,omitempty"` // "" when CONFIG is not permitted
	AppendFsync string   `json:"appendfsync,omitempty"`
	EvictPolicy string   `json:"maxmemory_policy,omitempty"`
	ConfigError string   `json:"config_error,omitempty"`
	Verdict     string   `json:"verdict"`  // "OK", "WARN" or "FAIL"
	Problems    []string `json:"problems"` // each makes the verdict FAIL
	Warnings    []string `json:"warnings"`
	rtt, offset time.Duration
	unreachable bool
}

// redact removes the pool's credentials from what the master sent (a
// hostile master can echo them anywhere).
func (r *report) redact(p *pool.RedisPool) {
	for _, s := range []*string{&r.Error, &r.Version, &r.Role, &r.RunID, &r.AppendOnly, &r.AppendFsync, &r.EvictPolicy, &r.ConfigError} {
		*s = p.Redact(*s)
	}
	for _, list := range [][]string{r.Problems, r.Warnings} {
		for i := range list {
			list[i] = p.Redact(list[i])
		}
	}
}

// finish sets the verdict from the problems and warnings.
func (r *report) finish() {
	switch {
	case len(r.Problems) > 0:
		r.Verdict = "FAIL"
	case len(r.Warnings) > 0:
		r.Verdict = "WARN"
	default:
		r.Verdict = "OK"
	}
	if r.Problems == nil {
		r.Problems = []string{}
	}
	if r.Warnings == nil {
		r.Warnings = []string{}
	}
}

// summary is doctor's verdict on the set of masters; the "summary" object
// of doctor --json.
type summary struct {
	Masters int `json:"masters"`
	Healthy int `json:"healthy"` // verdict OK or WARN
	Quorum  int `json:"quorum"`
	// Tolerates is how many more masters may fail with a quorum still
	// healthy; negative when the healthy masters are fewer than a quorum.
	Tolerates int    `json:"tolerates"`
	Text      string `json:"text"`
}

func summarize(reports []*report) summary {
	s := summary{Masters: len(reports), Quorum: len(reports)/2 + 1}
	for _, r := range reports {
		if r.Verdict != "FAIL" {
			s.Healthy++
		}
	}
	s.Tolerates = s.Healthy - s.Quorum
	if s.Tolerates >= 0 {
		s.Text = fmt.Sprintf("%d of %d masters healthy; a quorum of %d tolerates %s", s.Healthy, s.Masters, s.Quorum,
			plural(s.Tolerates, "more failure"))
	} else {
		s.Text = fmt.Sprintf("%d of %d masters healthy; a quorum needs %d: no lock can be taken until %s", s.Healthy, s.Masters, s.Quorum,
			plural(-s.Tolerates, "more master")+" "+map[bool]string{true: "is", false: "are"}[s.Tolerates == -1]+" healthy")
	}
	return s
}

const doctorLine = "usage: redlock doctor [--json]\n\n" +
	"Checks each master: reachable and answering, version, role (a primary),\n" +
	"persistence (appendonly yes, appendfsync always), eviction (noeviction),\n" +
	"clock offset, round trip, and that no server is listed twice. Prints a\n" +
	"verdict per master (OK, or one WARN or FAIL line per finding) and a summary;\n" +
	"exits 1 when any master FAILs. --json prints the same as one JSON object\n" +
	"(docs/operations.md)."

func newDoctorFlags() (*flag.FlagSet, *bool) {
	fs := newFlagSet("doctor")
	return fs, fs.Bool("json", false, "print one JSON object instead of text")
}

func doctorUsage() string { fs, _ := newDoctorFlags(); return flagUsage(fs, doctorLine) }

func parseDoctor(args []string) (runner, error) {
	fs, asJSON := newDoctorFlags()
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		return nil, usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return func(ctx context.Context, e *env) int { return cmdDoctor(ctx, e, *asJSON) }, nil
}

// cmdDoctor checks every master, all at once, and prints a verdict for
// each, then a summary.
func cmdDoctor(ctx context.Context, e *env, asJSON bool) int {
	reports := make([]*report, len(e.pools))
	var wg sync.WaitGroup
	for i, p := range e.pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i] = examine(ctx, p, e.timeout)
		}()
	}
	wg.Wait()
	sameServer(reports)
	code := exitOK
	for i, r := range reports {
		r.finish()
		r.redact(e.pools[i])
		if r.Verdict == "FAIL" {
			code = exitFailure
		}
	}
	sum := summarize(reports)
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			Masters []*report `json:"masters"`
			Summary summary   `json:"summary"`
		}{reports, sum})
		return code
	}
	for _, r := range reports {
		fmt.Fprintf(e.stdout, "%s\n", r.Addr)
		if r.Reachable {
			fmt.Fprintf(e.stdout, "  version %s, role %s, round trip %v, clock offset %v\n",
				r.Version, r.Role, r.rtt.Round(time.Microsecond), r.offset.Round(time.Millisecond))
			if r.ConfigError != "" {
				fmt.Fprintf(e.stdout, "  persistence and eviction unknown: %s\n", r.ConfigError)
			} else if r.AppendOnly != "" {
				fmt.Fprintf(e.stdout, "  appendonly %s, appendfsync %s, maxmemory-policy %s\n", r.AppendOnly, r.AppendFsync, r.EvictPolicy)
			}
		}
		for _, p := range r.Problems {
			fmt.Fprintf(e.stdout, "  FAIL: %s\n", p)
		}
		for _, w := range r.Warnings {
			fmt.Fprintf(e.stdout, "  WARN: %s\n", w)
		}
		if r.Verdict == "OK" {
			fmt.Fprintln(e.stdout, "  OK")
		}
	}
	fmt.Fprintf(e.stdout, "\n%s\n", sum.Text)
	return code
}

// sameServer fails every master whose run_id another address shares: one
// server listed twice (localhost:P and 127.0.0.1:P, say) would count twice
// toward a quorum.
func sameServer(reports []*report) {
	first := map[string]*report{}
	for _, r := range reports {
		if r.RunID == "" {
			continue
		}
		if o, ok := first[r.RunID]; ok {
			r.Problems = append(r.Problems, fmt.Sprintf("the same server as %s (run_id %s): a master listed twice counts twice toward a quorum; list each server once", o.Addr, r.RunID))
			if !slices.ContainsFunc(o.Problems, func(p string) bool { return strings.HasPrefix(p, "the same server as") }) {
				o.Problems = append(o.Problems, fmt.Sprintf("the same server as %s (run_id %s): a master listed twice counts twice toward a quorum; list each server once", r.Addr, r.RunID))
			}
			continue
		}
		first[r.RunID] = r
	}
}

// examine checks one master. A master that accepts the connection but
// does not answer (stopped, or overloaded) is told apart from one that
// cannot be reached.
func examine(ctx context.Context, p *pool.RedisPool, timeout time.Duration) *report {
	r := &report{Addr: p.Addr()}
	ctx, cancel := context.WithTimeout(ctx, max(2*time.Second, 10*timeout))
	defer cancel()
	start := time.Now()
	// down records why the master could not be examined.
	down := func(err error) *report {
		err = p.RedactError(err)
		r.Error = err.Error()
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			r.Problems = append(r.Problems, fmt.Sprintf("not answering within %v (hung or overloaded)",
				time.Since(start).Round(100*time.Millisecond)))
		} else {
			r.Problems = append(r.Problems, "unreachable: "+r.Error)
		}
		return r
	}
	c, err := p.GetContext(ctx)
	if err != nil {
		return down(err)
	}
	defer c.Close()
	do := func(cmd string, args ...any) (any, error) { return redis.DoContext(c, ctx, cmd, args...) }

	// Round trip: the median of a few PINGs.
	var rtts []time.Duration
	for i := 0; i < 5; i++ {
		start = time.Now()
		if _, err := do("PING"); err != nil {
			return down(err)
		}
		rtts = append(rtts, time.Since(start))
	}
	r.Reachable = true
	slices.Sort(rtts)
	r.rtt = rtts[len(rtts)/2]
	r.RoundTripUS = r.rtt.Microseconds()
	if r.rtt > timeout/2 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("round trip %v is more than half the per-master timeout %v: raise --timeout (WithTimeout)",
			r.rtt.Round(time.Microsecond), timeout))
	}

	r.Version, r.RunID = "unknown", ""
	if info, err := redis.String(do("INFO", "server")); err == nil {
		r.Version = infoField(info, "redis_version")
		// Untrusted bytes: only a run_id of the form Redis gives (40 hex
		// digits) is compared and shown.
		if id := infoField(info, "run_id"); len(id) == 40 && strings.Trim(id, "0123456789abcdef") == "" {
			r.RunID = id
		}
	}
	r.Role = "unknown"
	if info, err := redis.String(do("INFO", "replication")); err == nil {
		r.Role = p.Redact(infoField(info, "role")) // before %q escapes a secret past redaction
	}
	if r.Role != "master" {
		r.Problems = append(r.Problems, fmt.Sprintf("role is %q: a replica cannot be a lock master (writes fail, and a failover loses locks); point at a primary", r.Role))
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
		r.ClockOffMS = r.offset.Milliseconds()
		if r.offset > time.Second || r.offset < -time.Second {
			r.Warnings = append(r.Warnings, fmt.Sprintf("clock is %v off the local clock: check NTP (Redlock needs clocks that run at the same rate; a step in a master's clock can expire locks early)",
				r.offset.Round(time.Millisecond)))
		}
	}

	cfg, err := redis.StringMap(do("CONFIG", "GET", "*"))
	if err != nil {
		r.ConfigError = p.RedactError(err).Error()
		r.Warnings = append(r.Warnings, "CONFIG is not permitted: check by hand that appendonly is yes with appendfsync always, and maxmemory-policy is noeviction")
		return r
	}
	r.AppendOnly, r.AppendFsync, r.EvictPolicy = cfg["appendonly"], cfg["appendfsync"], cfg["maxmemory-policy"]
	switch {
	case r.AppendOnly != "yes":
		r.Warnings = append(r.Warnings, "no AOF: after a crash this master forgets its locks and fencing counters; set appendonly yes and appendfsync always, or keep a restarted master out for longer than the longest TTL")
	case r.AppendFsync != "always":
		r.Warnings = append(r.Warnings, fmt.Sprintf("appendfsync %s: a crash can lose the last writes (locks, fencing counters); set appendfsync always", r.AppendFsync))
	}
	if r.EvictPolicy != "noeviction" {
		r.Problems = append(r.Problems, fmt.Sprintf("maxmemory-policy %s can evict held locks: set noeviction", r.EvictPolicy))
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
