package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"io"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/resp"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// report is what doctor found on one master. Its JSON form is the
// "masters" element of doctor --json (docs/operations.md): keep the names
// stable.
type report struct {
	Addr        string `json:"address"`
	Reachable   bool   `json:"reachable"`
	Error       string `json:"error,omitempty"` // why it could not be examined
	Version     string `json:"version,omitempty"`
	Role        string `json:"role,omitempty"`
	RunID       string `json:"run_id,omitempty"`
	RoundTripUS int64  `json:"round_trip_us"`
	ClockOffMS  int64  `json:"clock_offset_ms"`
	// ClockRate is how fast the master's clock (TIME) ran against the
	// local monotonic clock over the sample (1.0 the same; 1.01 is 1 %
	// fast); absent when not measured.
	ClockRate *float64 `json:"clock_rate,omitempty"`
	// ClockRateError bounds the measurement's error (the round trips at
	// both ends over the sample), as a share: 0.001 is ±0.1 %.
	ClockRateError *float64 `json:"clock_rate_error,omitempty"`
	AppendOnly     string   `json:"appendonly,omitempty"` // "" when CONFIG is not permitted
	AppendFsync    string   `json:"appendfsync,omitempty"`
	EvictPolicy    string   `json:"maxmemory_policy,omitempty"`
	ConfigError    string   `json:"config_error,omitempty"`
	// Cluster is what doctor found on a member that is a Redis Cluster;
	// nil for a single master.
	Cluster     *clusterReport `json:"cluster,omitempty"`
	Verdict     string         `json:"verdict"`  // "OK", "WARN" or "FAIL"
	Problems    []string       `json:"problems"` // each makes the verdict FAIL
	Warnings    []string       `json:"warnings"`
	rtt, offset time.Duration
	sample      time.Duration // over which ClockRate was measured
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

const doctorLine = "usage: redlock doctor [--json] [--rate-sample D] [--drift-factor F] [--key KEY]\n\n" +
	"Checks each master: reachable and answering, version, role (a primary),\n" +
	"persistence (appendonly yes, appendfsync always), eviction (noeviction),\n" +
	"clock offset, clock rate, round trip, and that no server is listed twice.\n" +
	"The clock rate is the master's TIME sampled against the local monotonic\n" +
	"clock over --rate-sample; a rate that differs by more than the drift\n" +
	"factor FAILs (locks on that master can expire early). Prints a\n" +
	"verdict per master (OK, or one WARN or FAIL line per finding) and a summary;\n" +
	"exits 1 when any master FAILs. --json prints the same as one JSON object\n" +
	"(docs/operations.md).\n\n" +
	"A member that is a Redis Cluster (cluster://HOST:PORT[+HOST:PORT...]):\n" +
	"cluster_state ok, every slot covered, no failing slots, primaries announced\n" +
	"on loopback when the seeds are (others are not dialed), and each primary\n" +
	"checked as a master; with --key, the ACL is checked on the primary that\n" +
	"owns the key's slot."

// defaultRateSample is how long doctor samples each master's clock rate.
const defaultRateSample = 3 * time.Second

type doctorFlags struct {
	json       *bool
	rateSample *time.Duration
	drift      *float64
	key        *string
}

func newDoctorFlags() (*flag.FlagSet, doctorFlags) {
	fs := newFlagSet("doctor")
	return fs, doctorFlags{
		json:       fs.Bool("json", false, "print one JSON object instead of text"),
		rateSample: fs.Duration("rate-sample", defaultRateSample, "how long to sample each master's clock rate (0: do not measure it)"),
		drift:      fs.Float64("drift-factor", redlock.DefaultDriftFactor, "the clients' drift factor: a clock rate differing by more FAILs"),
		key: fs.String("key", "", "a key like the lock keys: run what locks send (SET NX PX, the extension, heal and release scripts) "+
			"on a probe key beside it, and FAIL a master whose ACL refuses any of it (give the lock user's credentials)"),
	}
}

func doctorUsage() string { fs, _ := newDoctorFlags(); return flagUsage(fs, doctorLine) }

func parseDoctor(args []string) (runner, error) {
	fs, f := newDoctorFlags()
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		return nil, usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *f.rateSample < 0 || *f.rateSample > 10*time.Minute {
		return nil, usageError{fmt.Sprintf("--rate-sample %v: want 0 (no rate check) up to 10m", *f.rateSample)}
	}
	if d := *f.drift; math.IsNaN(d) || d < 0 || d >= 1 {
		return nil, usageError{fmt.Sprintf("--drift-factor %v: want a share of the TTL in [0, 1)", d)}
	}
	rc := rateCheck{sample: *f.rateSample, drift: *f.drift, aclKey: *f.key}
	return func(ctx context.Context, e *env) int { return cmdDoctor(ctx, e, *f.json, rc) }, nil
}

// cmdDoctor checks every master, all at once, and prints a verdict for
// each, then a summary.
func cmdDoctor(ctx context.Context, e *env, asJSON bool, rc rateCheck) int {
	reports := make([]*report, len(e.pools))
	var wg sync.WaitGroup
	for i, p := range e.pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cm := e.clusters[i]; cm != nil {
				reports[i] = examineCluster(ctx, cm, e.timeout, rc)
				return
			}
			reports[i] = examine(ctx, p, e.timeout, rc)
		}()
	}
	wg.Wait()
	sameServer(reports)
	code := exitOK
	for i, r := range reports {
		r.finish()
		if e.pools[i] != nil {
			r.redact(e.pools[i])
		}
		if r.Verdict == "FAIL" {
			code = exitFailure
		}
	}
	sum := summarize(reports)
	var lock *lockCopies
	if rc.aclKey != "" {
		lock = copiesOf(ctx, e, rc.aclKey)
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			Masters []*report   `json:"masters"`
			Summary summary     `json:"summary"`
			Lock    *lockCopies `json:"lock,omitempty"`
		}{reports, sum, lock})
		return code
	}
	for _, r := range reports {
		printReport(e.stdout, r, "", "")
	}
	fmt.Fprintf(e.stdout, "\n%s\n", sum.Text)
	if lock != nil {
		fmt.Fprintf(e.stdout, "%s\n", lock.Text)
	}
	return code
}

// printReport prints one master's (or cluster node's) findings: its
// address after indent and label, then each finding indented two spaces
// more.
func printReport(w io.Writer, r *report, indent, label string) {
	fmt.Fprintf(w, "%s%s%s\n", indent, label, r.Addr)
	in := indent + "  "
	if r.Reachable && r.Cluster == nil {
		fmt.Fprintf(w, "%sversion %s, role %s, round trip %v, clock offset %v\n", in,
			r.Version, r.Role, r.rtt.Round(time.Microsecond), r.offset.Round(time.Millisecond))
		if r.ClockRate != nil {
			fmt.Fprintf(w, "%sclock rate %s the local monotonic clock (±%.3f%%, sampled over %v)\n", in,
				rateText(*r.ClockRate), *r.ClockRateError*100, r.sample)
		}
		if r.ConfigError != "" {
			fmt.Fprintf(w, "%spersistence and eviction unknown: %s\n", in, r.ConfigError)
		} else if r.AppendOnly != "" {
			fmt.Fprintf(w, "%sappendonly %s, appendfsync %s, maxmemory-policy %s\n", in, r.AppendOnly, r.AppendFsync, r.EvictPolicy)
		}
	}
	if c := r.Cluster; c != nil && c.State != "" {
		fmt.Fprintf(w, "%sRedis Cluster: cluster_state %s, %d of %d slots covered, %s (CLUSTER INFO and SLOTS from %s)\n", in,
			display(c.State), c.SlotsCovered, clusterSlots, strconv.Itoa(len(c.Nodes))+" primaries", c.From)
		if c.KeyNode != "" {
			fmt.Fprintf(w, "%s--key: the key's slot is on node %s, where its ACL was checked\n", in, c.KeyNode)
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "%sFAIL: %s\n", in, p)
	}
	for _, x := range r.Warnings {
		fmt.Fprintf(w, "%sWARN: %s\n", in, x)
	}
	if r.Verdict == "OK" {
		fmt.Fprintf(w, "%sOK\n", in)
	}
	if r.Cluster != nil {
		for _, n := range r.Cluster.Nodes {
			printReport(w, n, in, "node ")
		}
	}
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
func examine(ctx context.Context, p *pool.RedisPool, timeout time.Duration, rc rateCheck) *report {
	r := &report{Addr: p.Addr()}
	ctx, cancel := context.WithTimeout(ctx, max(2*time.Second, 10*timeout)+rc.sample)
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

	// lost tells, of an error of do (or of a clock check), a connection
	// that failed (the master stopped answering part-way, or broke the
	// protocol) from an answer that was not what doctor asked for: after
	// the first, the connection is gone.
	lost := func(err error) bool {
		var re redis.Error
		return err != nil && !errors.As(err, &re) && !errors.Is(err, errNotATime) && !errors.Is(err, errNoLocalTime)
	}

	r.Version, r.RunID = "unknown", ""
	reply, err := do("INFO", "server")
	if lost(err) {
		return down(err)
	}
	if info, err := redis.String(reply, err); err == nil {
		r.Version = infoField(info, "redis_version")
		// Untrusted bytes: only a run_id of the form Redis gives (40 hex
		// digits) is compared and shown, as the client reads it.
		r.RunID = resp.RunID(info)
	}
	r.Role = "unknown"
	reply, err = do("INFO", "replication")
	if lost(err) {
		return down(err)
	}
	if info, err := redis.String(reply, err); err == nil {
		r.Role = p.Redact(infoField(info, "role")) // before %q escapes a secret past redaction
	}
	if r.Role != "master" {
		r.Problems = append(r.Problems, fmt.Sprintf("role is %q: a replica cannot be a lock master (writes fail, and a failover loses locks); point at a primary", r.Role))
	}

	// Clock: TIME against the local clock, halfway through the call.
	before := time.Now()
	server, err := readTime(do)
	after := time.Now()
	if lost(err) {
		return down(err)
	}
	if err != nil {
		// Untrusted text: escaped after redaction, so that it cannot act
		// on the terminal. The rate check would fail the same way.
		r.Warnings = append(r.Warnings, "clock not read: "+display(p.RedactError(err).Error()))
		rc.sample = 0
	} else {
		r.offset = server.Sub(before.Add(after.Sub(before) / 2))
		r.ClockOffMS = r.offset.Milliseconds()
		if r.offset > time.Second || r.offset < -time.Second {
			r.Warnings = append(r.Warnings, fmt.Sprintf("clock is %v off the local clock: check NTP (Redlock needs clocks that run at the same rate; a step in a master's clock can expire locks early)",
				r.offset.Round(time.Millisecond)))
		}
	}

	if rc.sample > 0 {
		rate, bound, err := rc.measure(ctx, do)
		switch {
		case lost(err):
			return down(err)
		case err != nil:
			r.Warnings = append(r.Warnings, "clock rate not measured: "+display(p.RedactError(err).Error()))
		default:
			r.ClockRate, r.ClockRateError, r.sample = &rate, &bound, rc.sample
			// Only what the measurement's error cannot explain counts.
			if diff := math.Abs(rate-1) - bound; diff > rc.drift {
				r.Problems = append(r.Problems, fmt.Sprintf("clock runs %s the local monotonic clock: more than the drift factor %g%% allows; locks on this master can expire before their validity ends (check NTP, the clock source; docs/safety.md, assumption 4)",
					rateText(rate), rc.drift*100))
			} else if diff > rc.drift/2 {
				r.Warnings = append(r.Warnings, fmt.Sprintf("clock runs %s the local monotonic clock: more than half the drift factor %g%%", rateText(rate), rc.drift*100))
			} else if bound > rc.drift/2 {
				r.Warnings = append(r.Warnings, fmt.Sprintf("clock rate measured only to ±%.3f%% (slow round trips): sample longer (--rate-sample)", bound*100))
			}
		}
	}

	if rc.aclKey != "" {
		checkACL(r, c, max(timeout, time.Second), rc.aclKey)
	}

	reply, err = do("CONFIG", "GET", "*")
	if lost(err) {
		return down(err)
	}
	cfg, err := redis.StringMap(reply, err)
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

// rateCheck measures a master's clock rate: its TIME sampled against the
// local monotonic clock at both ends of a sample, each end the reading of
// the quickest of a few round trips, taken halfway through it. The error
// is at most half of each end's round trip over the sample (about 1 ms
// over 3 s: 0.03 %, against a drift factor of 1 %); measure returns that
// bound too.
type rateCheck struct {
	sample time.Duration // 0: not measured
	drift  float64
	// aclKey, with --key: run what locks send on a probe beside it
	// (checkACL). Not for a cluster member.
	aclKey string
}

// measure returns how fast the master's clock ran against the local one,
// and the bound of its error.
func (rc rateCheck) measure(ctx context.Context, do func(string, ...any) (any, error)) (rate, bound float64, err error) {
	// reading is the master's clock and the local one at the same moment.
	type reading struct {
		server, local time.Time
		rtt           time.Duration
	}
	read := func() (reading, error) {
		best := reading{rtt: -1}
		for i := 0; i < 8; i++ {
			before := time.Now()
			server, err := readTime(do)
			after := time.Now()
			if err != nil {
				return best, err
			}
			rtt := after.Sub(before)
			if best.rtt < 0 || rtt < best.rtt {
				// before carries the monotonic reading; so does local.
				best = reading{server: server, local: before.Add(rtt / 2), rtt: rtt}
			}
		}
		return best, nil
	}
	a, err := read()
	if err != nil {
		return 0, 0, err
	}
	t := time.NewTimer(rc.sample)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-t.C:
	}
	b, err := read()
	if err != nil {
		return 0, 0, err
	}
	local := b.local.Sub(a.local) // monotonic: a jump of the local wall clock does not count
	if local <= 0 {
		return 0, 0, errNoLocalTime
	}
	// Each end's local reading is off by at most half its round trip,
	// which the master's clock sees at its own rate; TIME has a
	// resolution of 1 µs at each end.
	rate = float64(b.server.Sub(a.server)) / float64(local)
	// (A clock that ran backwards has a negative rate; its bound is not.)
	bound = (math.Abs(rate)*float64((a.rtt+b.rtt)/2) + float64(2*time.Microsecond)) / float64(local)
	return rate, bound, nil
}

var (
	errNotATime    = errors.New("TIME answered something that is not a time")
	errNoLocalTime = errors.New("no time passed on the local clock")
)

// readTime asks the master for TIME and reads its answer, untrusted: two
// integers, seconds ≥ 0 and microseconds in [0, 10⁶).
func readTime(do func(string, ...any) (any, error)) (time.Time, error) {
	reply, err := do("TIME")
	if err != nil {
		return time.Time{}, err
	}
	v, ok := reply.([]any)
	if !ok {
		return time.Time{}, errNotATime
	}
	if len(v) != 2 {
		return time.Time{}, fmt.Errorf("%w (%d values, want 2)", errNotATime, len(v))
	}
	var secs, usecs int64
	if _, err := redis.Scan(v, &secs, &usecs); err != nil || usecs < 0 || usecs >= 1e6 || secs < 0 {
		return time.Time{}, errNotATime
	}
	return time.Unix(secs, usecs*1000), nil
}

// rateText says how a rate compares: "runs 50.000% fast against".
func rateText(rate float64) string {
	switch d := (rate - 1) * 100; {
	case d > 0:
		return fmt.Sprintf("%.3f%% fast against", d)
	case d < 0:
		return fmt.Sprintf("%.3f%% slow against", -d)
	}
	return "at the rate of"
}
