package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// The differential test: the same commands go to a real redis-server and
// to a simulated master, and their replies and the keyspaces they leave
// (keys, types, values, TTLs) must agree, so that the simulation cannot
// drift from Redis. The commands are those a Client sends for every lock
// kind (through a transport that runs each command on both), and random
// ones: SET NX PX, the release and extend scripts with random tokens,
// PTTL.

// tolerance is how far apart the two masters' TTLs (or times a script
// stored from TIME) may be, besides the differ's slack: Redis reads its
// clock for TIME and for the command behind it at two moments, and
// rounds each to its millisecond.
const tolerance = 5 * time.Millisecond

// nearExpiry is how close to a key's expiry no command is sent: each
// master expires keys by its own clock, read at a slightly different
// moment.
const nearExpiry = 6 * time.Millisecond

type differ struct {
	t    *testing.T
	m    *Master
	conn redis.Conn

	mu    sync.Mutex
	diffs []string
	n     int
	// slack is the longest Redis has taken, by its own clock, from the
	// TIME before a pipeline's commands to the TIME after them (redisAt):
	// the simulated master runs them at the first, Redis at any moment up
	// to the second — milliseconds apart when the machine is busy and
	// Redis is not scheduled between two of them. A TTL set by a command
	// so delayed stays that much longer on Redis, so the slack is the
	// largest seen, not the latest.
	slack time.Duration
	// straddled counts the commands whose reply depended on whether
	// Redis ran them before or after a key's expiry (do).
	straddled int
}

func (d *differ) do(args []string) (real any, sim any, realErr, simErr error) {
	d.steer()
	t, after, replies := d.redisAt(args)
	real, realErr = replies[0], asErr(replies[0])
	if realErr != nil {
		real = nil
	}
	d.n++
	d.m.SetNow(t)
	edge := d.expiringAround(t, after)
	if len(edge) == 0 {
		sim, simErr = d.m.Exec(args...)
		return
	}
	// Redis ran the command at a moment between its two TIMEs, and a
	// key it may touch expires about then: on Redis, up to the slack
	// later than on the simulated master, which set its TTL at a
	// pipeline's first TIME. So the simulated master runs the command
	// at the first TIME from the same keyspace up to three times: as it
	// is, with those keys alive, and with them gone, and keeps the
	// first run whose reply agrees with Redis's.
	saved := d.snapshot()
	tms := t.UnixMilli()
	for i, edit := range []func(map[string]*value){
		func(map[string]*value) {},
		func(data map[string]*value) {
			for _, k := range edge {
				data[k].exp = max(data[k].exp, tms)
			}
		},
		func(data map[string]*value) {
			for _, k := range edge {
				delete(data, k)
			}
		},
	} {
		data := (&keyspace{data: saved}).clone()
		edit(data)
		d.restore(data)
		sim, simErr = d.m.Exec(args...)
		if d.agree(args, real, sim, realErr, simErr) {
			if i > 0 {
				d.straddled++
			}
			return
		}
	}
	d.restore(saved)
	sim, simErr = d.m.Exec(args...)
	return
}

// expiringAround returns the keys on the simulated master whose expiry
// may fall, on Redis, between its two readings of its clock around a
// command: Redis may have set a key's TTL up to the slack after the
// simulated master did. A millisecond either side is for rounding.
func (d *differ) expiringAround(t, after time.Time) []string {
	from, to := t.Add(-d.slack).UnixMilli()-1, after.UnixMilli()+1
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	var keys []string
	for k, v := range d.m.ks.data {
		if v.exp != 0 && v.exp >= from && v.exp <= to {
			keys = append(keys, k)
		}
	}
	return keys
}

func (d *differ) snapshot() map[string]*value {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	return d.m.ks.clone()
}

func (d *differ) restore(data map[string]*value) {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	d.m.ks.data = data
}

// agree reports whether compare would record no difference.
func (d *differ) agree(args []string, real, sim any, realErr, simErr error) bool {
	n := len(d.diffs)
	d.compare(args, real, sim, realErr, simErr)
	ok := len(d.diffs) == n
	d.diffs = d.diffs[:n]
	return ok
}

func asErr(v any) error {
	err, _ := v.(error)
	return err
}

// redisAt runs cmds on Redis right behind TIME, in one pipeline, and
// returns Redis's time, its time after the commands (a second TIME,
// which also measures the slack) and the replies (an error reply as an
// error).
func (d *differ) redisAt(cmds ...[]string) (time.Time, time.Time, []any) {
	if err := d.conn.Send("TIME"); err != nil {
		d.t.Fatal(err)
	}
	for _, c := range cmds {
		a := make([]any, len(c)-1)
		for i, s := range c[1:] {
			a[i] = s
		}
		if err := d.conn.Send(c[0], a...); err != nil {
			d.t.Fatal(err)
		}
	}
	if err := d.conn.Send("TIME"); err != nil {
		d.t.Fatal(err)
	}
	if err := d.conn.Flush(); err != nil {
		d.t.Fatal(err)
	}
	now, err := redis.Int64s(d.conn.Receive())
	if err != nil {
		d.t.Fatal(err)
	}
	out := make([]any, len(cmds))
	for i := range cmds {
		v, err := d.conn.Receive()
		if err != nil {
			if _, ok := err.(redis.Error); !ok {
				d.t.Fatal(err)
			}
			v = err
		}
		out[i] = v
	}
	after, err := redis.Int64s(d.conn.Receive())
	if err != nil {
		d.t.Fatal(err)
	}
	at, end := time.Unix(now[0], now[1]*1000), time.Unix(after[0], after[1]*1000)
	d.slack = max(d.slack, end.Sub(at))
	return at, end, out
}

// steer waits until no key is about to expire on Redis: each master
// expires keys by its own reading of the clock, and the two readings of
// one instant may fall on either side of a millisecond, or, on a busy
// machine, as far apart as the slack.
func (d *differ) steer() {
	for {
		keys, err := redis.Strings(d.conn.Do("KEYS", "*"))
		if err != nil {
			d.t.Fatal(err)
		}
		close := false
		for _, k := range keys {
			if ttl, _ := redis.Int64(d.conn.Do("PTTL", k)); ttl >= 0 && ttl <= (nearExpiry+d.slack).Milliseconds() {
				close = true
			}
		}
		if !close {
			return
		}
		time.Sleep(nearExpiry + d.slack + time.Millisecond)
	}
}

// compare records a difference between the replies of the two masters.
func (d *differ) compare(args []string, real, sim any, realErr, simErr error) {
	if (realErr == nil) != (simErr == nil) || realErr != nil && errWord(realErr) != errWord(simErr) {
		d.diffs = append(d.diffs, fmt.Sprintf("%s: redis %v (%v), sim %v (%v)", show(args), real, realErr, sim, simErr))
		return
	}
	if args[0] == "INFO" {
		return // differs by design (addresses, run_ids)
	}
	if args[0] == "PTTL" {
		if a, ok := real.(int64); ok {
			if b, ok := sim.(int64); ok && (a == b || a >= 0 && b >= 0 && d.near(a, b)) {
				return
			}
		}
	}
	if realErr == nil && !d.sameReply(real, sim) {
		d.diffs = append(d.diffs, fmt.Sprintf("%s: redis %s, sim %s", show(args), showReply(real), showReply(sim)))
	}
}

func errWord(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, ' '); i > 0 {
		return s[:i]
	}
	return s
}

func show(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if len(a) > 40 {
			a = a[:12] + "…"
		}
		out[i] = strconv.Quote(a)
	}
	return strings.Join(out, " ")
}

func showReply(v any) string {
	switch v := v.(type) {
	case []byte:
		return strconv.Quote(string(v))
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = showReply(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprintf("%#v", v)
}

// sameReply compares replies, numbers that look like times (ms since
// 1970) and TTLs within tolerance and the slack.
func (d *differ) sameReply(a, b any) bool {
	switch a := a.(type) {
	case []any:
		bb, ok := b.([]any)
		if !ok || len(a) != len(bb) {
			return false
		}
		for i := range a {
			if !d.sameReply(a[i], bb[i]) {
				return false
			}
		}
		return true
	case []byte:
		bb, ok := b.([]byte)
		if !ok {
			return false
		}
		if string(a) == string(bb) {
			return true
		}
		x, err1 := strconv.ParseFloat(string(a), 64)
		y, err2 := strconv.ParseFloat(string(bb), 64)
		return err1 == nil && err2 == nil && x > 1e12 && d.near(int64(x), int64(y))
	case int64:
		bb, ok := b.(int64)
		return ok && (a == bb || a > 0 && bb > 0 && d.near(a, bb))
	}
	return reflect.DeepEqual(a, b)
}

// near reports whether two times or TTLs (ms) are within tolerance and
// the slack.
func (d *differ) near(a, b int64) bool {
	most := (tolerance + d.slack).Milliseconds()
	return a-b >= -most && a-b <= most
}

// run runs args on both and compares the replies; it returns Redis's.
func (d *differ) run(args []string) (any, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	real, sim, realErr, simErr := d.do(args)
	if realErr != nil && errWord(realErr) == "NOSCRIPT" && args[0] == "EVALSHA" {
		d.compare(args, real, sim, realErr, simErr)
		return real, realErr
	}
	d.compare(args, real, sim, realErr, simErr)
	return real, realErr
}

// state compares the two keyspaces: keys, types, values and TTLs.
func (d *differ) state(when string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.steer()
	realKeys, err := redis.Strings(d.conn.Do("KEYS", "*"))
	if err != nil {
		d.t.Fatal(err)
	}
	simKeys, _ := redis.Strings(d.m.Exec("KEYS", "*"))
	real, sim := map[string][]any{}, map[string][]any{}
	for _, k := range append(realKeys, simKeys...) {
		if real[k] != nil {
			continue
		}
		// Type, TTL and value at one instant on both.
		reads := [][]string{{"TYPE", k}, {"PTTL", k}, {"GET", k}, {"HGETALL", k}, {"ZRANGE", k, "0", "-1", "WITHSCORES"}}
		at, _, r := d.redisAt(reads...)
		d.m.SetNow(at)
		sr := make([]any, len(reads))
		for i, c := range reads {
			sr[i], _ = d.m.Exec(c...)
		}
		value := func(v []any) any {
			switch v[0] {
			case "string":
				return v[2]
			case "hash":
				return sortPairs(v[3])
			case "zset":
				return v[4]
			}
			return nil
		}
		real[k] = []any{r[0], r[1], value(r)}
		styp := sr[0]
		sim[k] = []any{sr[0], sr[1], value(sr)}
		if r[0] == "none" {
			delete(real, k)
			real[k] = nil
		}
		if styp == "none" {
			sim[k] = nil
		}
	}
	var names []string
	for k := range real {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		r, s := real[k], sim[k]
		if r == nil && s == nil {
			continue // expired on both since KEYS
		}
		if d.expiring(r) || d.expiring(s) {
			continue // a key at its expiry may be gone on one side only
		}
		if r != nil && s != nil {
			if a, ok := r[1].(int64); ok {
				if b, ok := s[1].(int64); ok && a >= 0 && b >= 0 && d.near(a, b) {
					r, s = []any{r[0], r[2]}, []any{s[0], s[2]}
				}
			}
		}
		if r == nil || s == nil || !d.sameReply(r, s) {
			d.diffs = append(d.diffs, fmt.Sprintf("after %s: key %q: redis %s, sim %s", when, k, showReply(r), showReply(s)))
		}
	}
}

// expiring reports whether a dumped key (type, TTL, value) is within
// tolerance and the slack of its expiry.
func (d *differ) expiring(k []any) bool {
	if k == nil {
		return false
	}
	ttl, ok := k[1].(int64)
	return ok && ttl >= 0 && ttl <= (tolerance+d.slack).Milliseconds()
}

// sortPairs sorts a hash's field-value pairs by field: Redis's order of a
// hash that grew past a listpack is its own.
func sortPairs(v any) any {
	a, ok := v.([]any)
	if !ok {
		return v
	}
	type pair struct{ f, v any }
	ps := make([]pair, 0, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		ps = append(ps, pair{a[i], a[i+1]})
	}
	sort.Slice(ps, func(i, j int) bool { return fmt.Sprint(ps[i].f) < fmt.Sprint(ps[j].f) })
	out := make([]any, 0, len(a))
	for _, p := range ps {
		out = append(out, p.f, p.v)
	}
	return out
}

// teeTransport runs each of a Client's commands on both masters and
// answers with Redis's reply.
type teeTransport struct{ d *differ }

func (tt *teeTransport) Addr() string { return "tee" }

func (tt *teeTransport) Send(cmd *transport.Command) {
	reply, err := tt.d.run(wireArgs(cmd, false))
	if err != nil && errWord(err) == "NOSCRIPT" {
		reply, err = tt.d.run(wireArgs(cmd, true))
	}
	var re redis.Error
	if errors.As(err, &re) {
		err = transport.ReplyError(re)
	}
	cmd.Complete(reply, err, transport.SendInfo{Sent: true})
}

func (tt *teeTransport) Subscribe(ctx context.Context, notify func(channel, payload string)) (transport.Subscription, error) {
	return nil, errors.New("tee: no subscriptions: waiters poll")
}

func (tt *teeTransport) Close() error { return nil }

func newDiffer(t *testing.T) *differ {
	redistest.SkipShort(t)
	srv := redistest.StartOne(t)
	conn, err := redis.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	d := &differ{t: t, conn: conn, m: NewMaster("sim", rand.New(rand.NewPCG(1, 2)), false)}
	d.m.SetRate(0) // the simulated master's clock is set to Redis's before each command
	return d
}

func (d *differ) report() {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, s := range d.diffs {
		if i == 20 {
			d.t.Errorf("... and %d more", len(d.diffs)-20)
			break
		}
		d.t.Error(s)
	}
	if d.straddled*50 > d.n {
		d.t.Errorf("%d of %d commands needed the keyspace edited at a key's expiry to agree with Redis: more than 1 in 50 is not the clock's rounding", d.straddled, d.n)
	}
	d.t.Logf("%d commands compared (%d ran across a key's expiry); Redis ran a pipeline's commands up to %v after its TIME",
		d.n, d.straddled, d.slack)
}

// TestSimMaster_agreesWithRedisOnEveryKind runs random operations of
// every lock kind through one Client whose master is both a
// redis-server and a simulated master, comparing every reply and, after
// every operation, the keyspaces.
func TestSimMaster_agreesWithRedisOnEveryKind(t *testing.T) {
	d := newDiffer(t)
	cl, err := redlock.NewWithTransports([]transport.Transport{&teeTransport{d}}, redlock.WithTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 33))
	type held struct {
		l *redlock.Lock
		r *redlock.Reentrant
	}
	var locks []held
	keys := []string{"a", "b", "c"}
	for i := 0; i < 200; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		key := keys[rng.IntN(len(keys))]
		ttlD := time.Duration(150+rng.IntN(400)) * time.Millisecond
		ttl := redlock.WithTTL(ttlD)
		var opts []redlock.LockOption
		opts = append(opts, ttl)
		if rng.IntN(3) == 0 {
			opts = append(opts, redlock.WithMetadata("m"+strconv.Itoa(i)))
		}
		var l *redlock.Lock
		var what string
		switch k := rng.IntN(10); {
		case k == 0 && len(locks) > 0:
			j := rng.IntN(len(locks))
			h := locks[j]
			locks = slices.Delete(locks, j, j+1)
			if h.r != nil {
				what, err = "reentrant release", h.r.Release(ctx)
			} else {
				what, err = "release", h.l.Release(ctx)
			}
		case k == 1 && len(locks) > 0:
			h := locks[rng.IntN(len(locks))]
			if h.r == nil {
				what, err = "extend", h.l.Extend(ctx, 300*time.Millisecond)
			}
		case k == 2:
			what = "fenced"
			l, err = cl.TryAcquire(ctx, key, append(opts, redlock.WithFencing())...)
		case k == 3:
			what = "fair"
			l, err = cl.TryAcquire(ctx, key, append(opts, redlock.WithFair())...)
		case k == 4:
			// One read in four meets a reentrant lock's hash: kinds
			// must not be mixed on a key, and both masters must refuse
			// it alike, writing nothing.
			what = "read"
			rk := "rw-" + key
			if rng.IntN(4) == 0 {
				what, rk = "read on a reentrant key", "re-"+key
			}
			l, err = cl.TryAcquireRead(ctx, rk, opts...)
		case k == 5:
			what = "write"
			l, err = cl.TryAcquireWrite(ctx, "rw-"+key, opts...)
		case k == 6:
			what = "multi"
			l, err = cl.TryAcquireMulti(ctx, []string{"m-" + key, "m-" + keys[rng.IntN(len(keys))] + "2"}, opts...)
		case k == 7:
			what = "reentrant"
			var r *redlock.Reentrant
			r, err = cl.NewReentrant("re-"+key, "owner"+strconv.Itoa(rng.IntN(2)), opts...)
			if err == nil {
				if err = r.TryAcquire(ctx); err == nil {
					locks = append(locks, held{r: r})
				}
			}
		case k == 8:
			what = "election"
			var e *election.Election
			e, err = election.New(cl, "el-"+key, election.WithTTL(ttlD))
			if err == nil {
				var ld *election.Leadership
				if ld, err = e.Campaign(ctx, "v"+strconv.Itoa(i)); err == nil {
					l = ld.Lock()
				}
			}
		default:
			what = "plain"
			l, err = cl.TryAcquire(ctx, key, opts...)
		}
		cancel()
		if l != nil {
			locks = append(locks, held{l: l})
		}
		d.state(fmt.Sprintf("op %d (%s on %s: %v)", i, what, key, err))
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // let TTLs run
	}
	for _, h := range locks {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if h.r != nil {
			h.r.Release(ctx)
		} else {
			h.l.Release(ctx)
		}
		cancel()
	}
	d.state("releasing every lock")
	d.report()
}

// TestSimMaster_agreesWithRedisOnRandomCommands sends random SET NX PX,
// release and extend scripts (random tokens and TTLs, some invalid),
// PEXPIRE, PTTL and GET to both masters.
func TestSimMaster_agreesWithRedisOnRandomCommands(t *testing.T) {
	d := newDiffer(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 34))
	var release, extend *transport.Script
	for _, s := range transport.Scripts() {
		switch s.Name() {
		case "release":
			if release == nil {
				release = s
			}
		case "extend":
			if extend == nil {
				extend = s
			}
		}
	}
	keys := []string{"x", "y"}
	toks := []string{"t1", "t2", "t3"}
	ttl := func() string { return strconv.Itoa([]int{-5, 0, 1, 20, 300, 1000}[rng.IntN(6)]) }
	for i := 0; i < 2000; i++ {
		k, tok := keys[rng.IntN(2)], toks[rng.IntN(3)]
		var args []string
		switch rng.IntN(7) {
		case 0, 1:
			args = []string{"SET", k, tok, "NX", "PX", ttl()}
		case 2:
			args = []string{"EVAL", release.Source(), "1", k, tok, []string{"", "ch"}[rng.IntN(2)]}
		case 3:
			args = []string{"EVAL", extend.Source(), "1", k, tok, ttl()}
		case 4:
			args = []string{"PEXPIRE", k, ttl()}
		case 5:
			args = []string{"PTTL", k}
		case 6:
			args = []string{"GET", k}
		}
		d.run(args)
		if i%50 == 0 {
			d.state(fmt.Sprintf("command %d", i))
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond) // the subject: a random spell, in which short TTLs run out
		}
	}
	d.state("the last command")
	d.report()
}
