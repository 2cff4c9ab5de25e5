package layout

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/resp"
)

// Reading a master.
//
// A Reader reads what one master holds for a lock key with read-only
// commands, in at most four round trips (the fourth, only where a
// holder has metadata, reads it), and nothing in it talks to a
// network: the caller sends each round trip's commands (Next) by whatever
// client it has and hands the replies back (Feed). Every reply is
// untrusted: it must have the one shape its command allows, and what a
// Reader keeps is bounded (MaxEntries, MaxValue) whatever the master sends.
// The commands themselves bound what an honest master sends back: a
// string lock is read with GETRANGE, a hash larger than MaxEntries with
// one HSCAN, a queue with ZRANGE of at most MaxEntries, metadata with one
// HMGET of the holders read.

// Bounds on what a Reader reads and keeps.
const (
	// MaxEntries is the most hash fields (holders) and queue entries read.
	MaxEntries = 1024
	// MaxValue is the most bytes of one token, owner ID, field or value.
	MaxValue = 64 << 10
	// maxStatus is the most bytes of a status reply (a key's type).
	maxStatus = 64
)

// ErrMalformed is matched (errors.Is) by the error of a reply that does not
// have the shape its command allows or exceeds the bounds. The message
// names the command and the reply's shape and size, never its bytes.
var ErrMalformed = errors.New("layout: malformed reply")

// Command is one read command: its name and arguments, as most Redis
// clients take them.
type Command struct {
	Name string
	Args []any
}

// Reader reads what one master holds for one lock key. Make one with
// NewReader; it is not safe for concurrent use.
type Reader struct {
	key     string
	step    int // the round trip Next returns next
	done    bool
	meta    bool // the commands out are the metadata's HMGET
	hasMeta bool // the metadata hash exists
	cmds    []Command
	now     int64 // the master's clock, Unix ms
	st      State
	err     error
}

// NewReader returns a Reader of what a master holds for key.
func NewReader(key string) *Reader {
	return &Reader{key: key}
}

// Next returns the commands of the next round trip, or nil once the
// reading is complete (or failed): then State and Err tell the outcome.
func (r *Reader) Next() []Command {
	if r.err != nil || r.done {
		return nil
	}
	if r.step == 0 {
		r.cmds = []Command{
			{"TIME", nil},
			{"TYPE", []any{r.key}},
			{"PTTL", []any{r.key}},
			{"GET", []any{FenceKey(r.key)}},
			{"ZCARD", []any{QueueKey(r.key)}},
			{"ZRANGE", []any{QueueKey(r.key), 0, MaxEntries - 1, "WITHSCORES"}},
			{"ZRANGE", []any{QueueDeadlinesKey(r.key), 0, MaxEntries - 1, "WITHSCORES"}},
			{"EXISTS", []any{MetaKey(r.key)}},
		}
	}
	if len(r.cmds) == 0 {
		r.done = true
		return nil
	}
	return r.cmds
}

// Feed takes the replies to the commands Next returned last, in order.
// Replies have the Go shapes of RESP2 replies: nil, int64, a string for a
// status, []byte (or a string) for a bulk string, []any for an array, and
// an error value for an error reply. A reply that is an error, or that has
// another shape than its command allows (ErrMalformed), ends the reading
// with that error, wrapped with the command's name.
func (r *Reader) Feed(replies []any) error {
	if r.err != nil {
		return r.err
	}
	if len(replies) != len(r.cmds) || r.done {
		r.err = fmt.Errorf("%w: %d replies to %d commands", ErrMalformed, len(replies), len(r.cmds))
		return r.err
	}
	for i, v := range replies {
		if err, ok := v.(error); ok {
			r.err = fmt.Errorf("layout: %s: %w", r.cmds[i].Name, err)
			return r.err
		}
	}
	var next []Command
	var err error
	switch {
	case r.meta:
		err = r.feedMeta(replies[0])
	case r.step == 0:
		next, err = r.feedProbe(replies)
	case r.step == 1:
		next, err = r.feedSize(replies)
	default:
		err = r.feedHash(replies[0])
	}
	if err != nil {
		r.err = err
		return err
	}
	r.step++
	switch {
	case r.meta:
		next = nil
	case next == nil && r.hasMeta && len(r.st.Holders) > 0:
		next, r.meta = r.metaCommand(), true
	}
	r.cmds = next
	return nil
}

// metaCommand reads the metadata of the holders read.
func (r *Reader) metaCommand() []Command {
	args := make([]any, 0, 1+len(r.st.Holders))
	args = append(args, MetaKey(r.key))
	for _, h := range r.st.Holders {
		args = append(args, h.Token)
	}
	return []Command{{"HMGET", args}}
}

// feedMeta reads HMGET's reply: one bulk string or nil per holder. A value
// longer than MaxMeta is cut there (Truncated).
func (r *Reader) feedMeta(v any) error {
	a, ok := v.([]any)
	if !ok || len(a) != len(r.st.Holders) {
		return malformed("HMGET", v)
	}
	for i, x := range a {
		if x == nil {
			continue
		}
		m, ok := resp.Bulk(x)
		if !ok {
			return malformed("HMGET", v)
		}
		if len(m) > MaxMeta {
			m, r.st.Truncated = m[:MaxMeta], true
		}
		r.st.Holders[i].Meta = m
	}
	return nil
}

// State returns what was read: complete once Next returned nil and Err is
// nil.
func (r *Reader) State() State { return r.st }

// Err returns the error that ended the reading, or nil.
func (r *Reader) Err() error { return r.err }

// feedProbe reads the first round trip and picks the second.
func (r *Reader) feedProbe(v []any) ([]Command, error) {
	if err := r.readTime(v[0]); err != nil {
		return nil, err
	}
	typ, ok := v[1].(string)
	if !ok || len(typ) == 0 || len(typ) > maxStatus {
		return nil, malformed("TYPE", v[1])
	}
	r.st.Type = typ
	pttl, ok := v[2].(int64)
	if !ok || pttl < -2 {
		return nil, malformed("PTTL", v[2])
	}
	if err := r.readFence(v[3]); err != nil {
		return nil, err
	}
	n, ok := v[4].(int64)
	if !ok || n < 0 {
		return nil, malformed("ZCARD", v[4])
	}
	r.st.QueueLen = n
	if err := r.readQueue(v[5], v[6]); err != nil {
		return nil, err
	}
	switch v[7] {
	case int64(0):
	case int64(1):
		r.hasMeta = true
	default:
		return nil, malformed("EXISTS", v[7])
	}
	if typ == "none" || pttl == -2 { // gone, or gone since TYPE
		r.st.Kind, r.st.Type = KindFree, "none"
		return nil, nil
	}
	r.st.TTL = NoExpiry
	if pttl >= 0 {
		r.st.TTL = time.Duration(pttl) * time.Millisecond
	}
	switch typ {
	case "string":
		return []Command{{"STRLEN", []any{r.key}}, {"GETRANGE", []any{r.key, 0, MaxValue - 1}}}, nil
	case "hash":
		return []Command{{"HLEN", []any{r.key}}}, nil
	}
	r.st.Kind = KindForeign
	return nil, nil
}

// feedSize reads a string lock's token, or a hash's size and picks how to
// read its fields.
func (r *Reader) feedSize(v []any) ([]Command, error) {
	if r.st.Type == "string" {
		n, ok := v[0].(int64)
		if !ok || n < 0 {
			return nil, malformed("STRLEN", v[0])
		}
		tok, ok := resp.Bulk(v[1])
		if !ok || len(tok) > MaxValue {
			return nil, malformed("GETRANGE", v[1])
		}
		r.st.Truncated = r.st.Truncated || n > int64(len(tok))
		if tok == "" { // "" is no token: deleted since TYPE, or not ours
			r.st.Kind = KindForeign
			return nil, nil
		}
		r.st.Kind = KindLock
		r.st.Holders = []Holder{{Mode: ModeExclusive, Token: tok, TTL: r.st.TTL}}
		return nil, nil
	}
	n, ok := v[0].(int64)
	if !ok || n < 0 {
		return nil, malformed("HLEN", v[0])
	}
	if n == 0 {
		r.st.Kind, r.st.Type, r.st.TTL = KindFree, "none", 0
		return nil, nil
	}
	if n > MaxEntries {
		r.st.Truncated = true
		return []Command{{"HSCAN", []any{r.key, 0, "COUNT", MaxEntries}}}, nil
	}
	return []Command{{"HGETALL", []any{r.key}}}, nil
}

// feedHash reads a hash's fields (HGETALL, or HSCAN's [cursor, fields]).
func (r *Reader) feedHash(v any) error {
	name := "HGETALL"
	if r.st.Truncated {
		name = "HSCAN"
		a, ok := v.([]any)
		if !ok || len(a) != 2 {
			return malformed(name, v)
		}
		if _, ok := resp.Bulk(a[0]); !ok {
			return malformed(name, v)
		}
		v = a[1]
	}
	pairs, ok := v.([]any)
	if !ok || len(pairs)%2 != 0 {
		return malformed(name, v)
	}
	if len(pairs) > 2*MaxEntries {
		pairs = pairs[:2*MaxEntries]
	}
	fields := make([][2]string, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		f, ok1 := resp.Bulk(pairs[i])
		val, ok2 := resp.Bulk(pairs[i+1])
		if !ok1 || !ok2 || len(f) > MaxValue || len(val) > MaxValue {
			return malformed(name, v)
		}
		fields = append(fields, [2]string{f, val})
	}
	r.classify(fields)
	return nil
}

// classify tells a read-write lock from a reentrant one by its fields. A
// reentrant lock's hold id (keys.HoldIDField) is not one of its owners.
func (r *Reader) classify(fields [][2]string) {
	if i := slices.IndexFunc(fields, func(f [2]string) bool { return f[0] == keys.HoldIDField }); i >= 0 {
		fields = slices.Delete(slices.Clone(fields), i, i+1)
		if len(fields) == 0 {
			r.st.Kind = KindForeign
			return
		}
	}
	rw, owners := 0, 0
	for _, f := range fields {
		if isRWField(f[0]) {
			rw++
		} else {
			owners++
		}
	}
	switch {
	case rw == len(fields):
		r.readWrite(fields)
	case owners == len(fields):
		r.reentrant(fields)
	default:
		r.st.Kind = KindForeign
	}
}

func isRWField(f string) bool {
	return f == keys.IntentField || f == keys.IntentExpiryField ||
		(len(f) >= len(keys.ReaderPrefix) && f[:len(keys.ReaderPrefix)] == keys.ReaderPrefix) ||
		(len(f) >= len(keys.WriterPrefix) && f[:len(keys.WriterPrefix)] == keys.WriterPrefix)
}

// readWrite reads a read-write lock's entries as rw.lua does: an entry or
// an intent whose expiry has passed no longer counts.
func (r *Reader) readWrite(fields [][2]string) {
	var writers, readers []Holder
	intent, intentExp := "", int64(0)
	for _, f := range fields {
		switch f[0] {
		case keys.IntentField:
			intent = f[1]
			continue
		case keys.IntentExpiryField:
			exp, ok := decimal(f[1])
			if !ok {
				r.st.Kind = KindForeign
				return
			}
			intentExp = exp
			continue
		}
		exp, ok := decimal(f[1])
		if !ok {
			r.st.Kind = KindForeign
			return
		}
		if exp <= r.now {
			continue
		}
		h := Holder{TTL: time.Duration(exp-r.now) * time.Millisecond}
		if f[0][:len(keys.WriterPrefix)] == keys.WriterPrefix {
			h.Mode, h.Token = ModeWrite, f[0][len(keys.WriterPrefix):]
			writers = append(writers, h)
		} else {
			h.Mode, h.Token = ModeRead, f[0][len(keys.ReaderPrefix):]
			readers = append(readers, h)
		}
	}
	byToken := func(hs []Holder) {
		sort.Slice(hs, func(i, j int) bool { return hs[i].Token < hs[j].Token })
	}
	byToken(writers)
	byToken(readers)
	r.st.Kind = KindReadWrite
	r.st.Holders = slices.Concat(writers, readers)
	if intent != "" && intentExp > r.now {
		r.st.Intent = &Intent{Writer: intent, TTL: time.Duration(intentExp-r.now) * time.Millisecond}
	}
}

// reentrant reads a reentrant lock: owner -> hold count.
func (r *Reader) reentrant(fields [][2]string) {
	hs := make([]Holder, 0, len(fields))
	for _, f := range fields {
		n, ok := decimal(f[1])
		if !ok || n <= 0 {
			r.st.Kind = KindForeign
			return
		}
		hs = append(hs, Holder{Mode: ModeReentrant, Token: f[0], Count: n, TTL: r.st.TTL})
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].Token < hs[j].Token })
	r.st.Kind, r.st.Holders = KindReentrant, hs
}

// readTime reads TIME: [seconds, microseconds], both decimal.
func (r *Reader) readTime(v any) error {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return malformed("TIME", v)
	}
	s, ok1 := resp.Bulk(a[0])
	us, ok2 := resp.Bulk(a[1])
	sec, ok3 := decimal(s)
	micro, ok4 := decimal(us)
	if !ok1 || !ok2 || !ok3 || !ok4 || sec < 0 || sec > math.MaxInt64/1000-1 || micro < 0 || micro >= 1e6 {
		return malformed("TIME", v)
	}
	r.now = sec*1000 + micro/1000
	return nil
}

// readFence reads the fencing counter: nil, or a decimal uint64.
func (r *Reader) readFence(v any) error {
	if v == nil {
		return nil
	}
	s, ok := resp.Bulk(v)
	if !ok || len(s) == 0 || len(s) > 20 {
		return malformed("GET", v)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return malformed("GET", v)
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return malformed("GET", v)
	}
	r.st.Fence, r.st.Fenced = n, true
	return nil
}

// readQueue reads a fair lock's queue and its deadlines (ZRANGE WITHSCORES
// replies: member, score, member, score...).
func (r *Reader) readQueue(queue, deadlines any) error {
	q, err := zpairs(queue)
	if err != nil {
		return err
	}
	d, err := zpairs(deadlines)
	if err != nil {
		return err
	}
	if int64(len(q)) < r.st.QueueLen {
		r.st.Truncated = true
	}
	until := make(map[string]float64, len(d))
	for _, p := range d {
		until[p.member] = p.score
	}
	for _, p := range q {
		w := Waiter{ID: p.member, Arrival: int64(p.score), TTL: NoExpiry}
		if exp, ok := until[p.member]; ok {
			if int64(exp) <= r.now {
				continue
			}
			w.TTL = time.Duration(int64(exp)-r.now) * time.Millisecond
		}
		r.st.Queue = append(r.st.Queue, w)
	}
	return nil
}

type zpair struct {
	member string
	score  float64
}

func zpairs(v any) ([]zpair, error) {
	a, ok := v.([]any)
	if !ok || len(a)%2 != 0 || len(a) > 2*MaxEntries {
		return nil, malformed("ZRANGE", v)
	}
	ps := make([]zpair, 0, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		m, ok1 := resp.Bulk(a[i])
		s, ok2 := resp.Bulk(a[i+1])
		if !ok1 || !ok2 || len(m) > MaxValue || len(s) > maxStatus {
			return nil, malformed("ZRANGE", v)
		}
		f, err := strconv.ParseFloat(s, 64)
		// Scores are times: finite and within int64 once converted.
		if err != nil || math.IsNaN(f) || f < -9e18 || f > 9e18 {
			return nil, malformed("ZRANGE", v)
		}
		ps = append(ps, zpair{m, f})
	}
	return ps, nil
}

// decimal parses a non-negative decimal integer of at most 18 digits (below 2^63),
// without sign or spaces.
func decimal(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// malformed describes a reply by its shape and size only.
func malformed(cmd string, v any) error {
	return fmt.Errorf("%w: %s replied %s", ErrMalformed, cmd, resp.Shape(v))
}
