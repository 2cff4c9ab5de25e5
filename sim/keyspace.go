package sim

import (
	"errors"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The keyspace of a simulated master: strings, hashes and sorted sets,
// each with an expiry in the master's milliseconds, and the commands the
// lock scripts and the Client send, answering as Redis 7 does (checked
// against redis-server by the differential test).

// ReplyError is a master's error reply.
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// status is a status reply ("OK"), as redigo gives it: a string.
type status = string

var (
	errWrongType = ReplyError("WRONGTYPE Operation against a key holding the wrong kind of value")
	errSyntax    = ReplyError("ERR syntax error")
	errNotInt    = ReplyError("ERR value is not an integer or out of range")
	errNotFloat  = ReplyError("ERR value is not a valid float")
	errExpire    = ReplyError("ERR invalid expire time in 'set' command")
)

func errArgs(name string) error {
	return ReplyError("ERR wrong number of arguments for '" + strings.ToLower(name) + "' command")
}

type valueKind uint8

const (
	kindString valueKind = iota + 1
	kindHash
	kindZSet
)

type value struct {
	kind valueKind
	s    string
	h    []field // a small hash keeps its insertion order, as a listpack does
	z    map[string]float64
	exp  int64 // in the master's ms; 0: none
}

type field struct{ k, v string }

// keyspace is a master's data. Its methods are called with the master's
// lock held; now is the master's clock in ms, fixed for one command (and
// for a whole script, as Redis does).
type keyspace struct {
	data map[string]*value
	now  int64
}

func newKeyspace() *keyspace { return &keyspace{data: map[string]*value{}} }

// clone copies the keyspace (a persisted state).
func (ks *keyspace) clone() map[string]*value {
	out := make(map[string]*value, len(ks.data))
	for k, v := range ks.data {
		c := *v
		c.h = append([]field(nil), v.h...)
		if v.z != nil {
			c.z = make(map[string]float64, len(v.z))
			for m, s := range v.z {
				c.z[m] = s
			}
		}
		out[k] = &c
	}
	return out
}

// get returns the live value of key, expiring it when its time passed
// (Redis: a key expires when now > its expiry).
func (ks *keyspace) get(key string) *value {
	v := ks.data[key]
	if v != nil && v.exp != 0 && ks.now > v.exp {
		delete(ks.data, key)
		return nil
	}
	return v
}

// exec runs one plain command. args[0] is the name.
func (ks *keyspace) exec(m *Master, args []string) (any, error) {
	if len(args) == 0 {
		return nil, ReplyError("ERR empty command")
	}
	name := strings.ToUpper(args[0])
	a := args[1:]
	switch name {
	case "PING":
		return status("PONG"), nil
	case "GET":
		if len(a) != 1 {
			return nil, errArgs(name)
		}
		v := ks.get(a[0])
		if v == nil {
			return nil, nil
		}
		if v.kind != kindString {
			return nil, errWrongType
		}
		return []byte(v.s), nil
	case "SET":
		return ks.set(a)
	case "DEL":
		if len(a) < 1 {
			return nil, errArgs(name)
		}
		var n int64
		for _, k := range a {
			if ks.get(k) != nil {
				delete(ks.data, k)
				n++
			}
		}
		return n, nil
	case "EXISTS":
		if len(a) < 1 {
			return nil, errArgs(name)
		}
		var n int64
		for _, k := range a {
			if ks.get(k) != nil {
				n++
			}
		}
		return n, nil
	case "PEXPIRE", "PEXPIREAT":
		if len(a) != 2 {
			return nil, errArgs(name)
		}
		ms, err := parseInt(a[1])
		if err != nil {
			return nil, err
		}
		v := ks.get(a[0])
		if v == nil {
			return int64(0), nil
		}
		at := ms
		if name == "PEXPIRE" {
			at = ks.now + ms
		}
		if at <= ks.now {
			delete(ks.data, a[0]) // Redis deletes a key given a time in the past
			return int64(1), nil
		}
		v.exp = at
		return int64(1), nil
	case "PTTL":
		if len(a) != 1 {
			return nil, errArgs(name)
		}
		v := ks.get(a[0])
		switch {
		case v == nil:
			return int64(-2), nil
		case v.exp == 0:
			return int64(-1), nil
		}
		return max(v.exp-ks.now, 0), nil
	case "HSET":
		if len(a) < 3 || len(a)%2 != 1 {
			return nil, errArgs(name)
		}
		v, err := ks.typed(a[0], kindHash, true)
		if err != nil {
			return nil, err
		}
		var added int64
		for i := 1; i < len(a); i += 2 {
			if v.hset(a[i], a[i+1]) {
				added++
			}
		}
		return added, nil
	case "HGET":
		if len(a) != 2 {
			return nil, errArgs(name)
		}
		v, err := ks.typed(a[0], kindHash, false)
		if err != nil || v == nil {
			return nil, err
		}
		if i := v.hfind(a[1]); i >= 0 {
			return []byte(v.h[i].v), nil
		}
		return nil, nil
	case "HEXISTS":
		if len(a) != 2 {
			return nil, errArgs(name)
		}
		v, err := ks.typed(a[0], kindHash, false)
		if err != nil || v == nil {
			return int64(0), err
		}
		if v.hfind(a[1]) >= 0 {
			return int64(1), nil
		}
		return int64(0), nil
	case "HDEL":
		if len(a) < 2 {
			return nil, errArgs(name)
		}
		v, err := ks.typed(a[0], kindHash, false)
		if err != nil || v == nil {
			return int64(0), err
		}
		var n int64
		for _, f := range a[1:] {
			if i := v.hfind(f); i >= 0 {
				v.h = append(v.h[:i], v.h[i+1:]...)
				n++
			}
		}
		if len(v.h) == 0 {
			delete(ks.data, a[0])
		}
		return n, nil
	case "HGETALL":
		if len(a) != 1 {
			return nil, errArgs(name)
		}
		v, err := ks.typed(a[0], kindHash, false)
		if err != nil {
			return nil, err
		}
		out := []any{}
		if v != nil {
			for _, f := range v.h {
				out = append(out, []byte(f.k), []byte(f.v))
			}
		}
		return out, nil
	case "ZADD":
		return ks.zadd(a)
	case "ZREM":
		if len(a) < 2 {
			return nil, errArgs(name)
		}
		v, err := ks.typed(a[0], kindZSet, false)
		if err != nil || v == nil {
			return int64(0), err
		}
		var n int64
		for _, mem := range a[1:] {
			if _, ok := v.z[mem]; ok {
				delete(v.z, mem)
				n++
			}
		}
		if len(v.z) == 0 {
			delete(ks.data, a[0])
		}
		return n, nil
	case "KEYS": // only KEYS *, for checks
		if len(a) != 1 || a[0] != "*" {
			return nil, errSyntax
		}
		out := []any{}
		for k := range ks.data {
			if ks.get(k) != nil {
				out = append(out, []byte(k))
			}
		}
		return out, nil
	case "TYPE":
		if len(a) != 1 {
			return nil, errArgs(name)
		}
		v := ks.get(a[0])
		if v == nil {
			return status("none"), nil
		}
		return status([]string{kindString: "string", kindHash: "hash", kindZSet: "zset"}[v.kind]), nil
	case "ZRANGE":
		withScores := len(a) == 4 && strings.EqualFold(a[3], "WITHSCORES")
		if withScores {
			a = a[:3]
		}
		if len(a) != 3 {
			return nil, errSyntax
		}
		start, err1 := parseInt(a[1])
		stop, err2 := parseInt(a[2])
		if err1 != nil || err2 != nil {
			return nil, errNotInt
		}
		v, err := ks.typed(a[0], kindZSet, false)
		if err != nil {
			return nil, err
		}
		ms := v.zsorted()
		n := int64(len(ms))
		if start < 0 {
			start = max(n+start, 0)
		}
		if stop < 0 {
			stop = n + stop
		}
		stop = min(stop, n-1)
		out := []any{}
		for i := start; i <= stop; i++ {
			out = append(out, []byte(ms[i]))
			if withScores {
				out = append(out, []byte(strconv.FormatFloat(v.z[ms[i]], 'g', 17, 64)))
			}
		}
		return out, nil
	case "ZRANGEBYSCORE":
		if len(a) != 3 {
			return nil, errSyntax
		}
		lo, err1 := parseScore(a[1])
		hi, err2 := parseScore(a[2])
		if err1 != nil || err2 != nil {
			return nil, ReplyError("ERR min or max is not a float")
		}
		v, err := ks.typed(a[0], kindZSet, false)
		if err != nil {
			return nil, err
		}
		out := []any{}
		for _, mem := range v.zsorted() {
			if s := v.z[mem]; s >= lo && s <= hi {
				out = append(out, []byte(mem))
			}
		}
		return out, nil
	case "PUBLISH":
		if len(a) != 2 {
			return nil, errArgs(name)
		}
		return m.publish(a[0], a[1]), nil
	case "PUBSUB":
		if len(a) >= 1 && strings.EqualFold(a[0], "NUMSUB") {
			out := []any{}
			for _, ch := range a[1:] {
				out = append(out, []byte(ch), m.numSub(ch))
			}
			return out, nil
		}
		return nil, errSyntax
	case "TIME":
		return []any{[]byte(strconv.FormatInt(ks.now/1000, 10)), []byte(strconv.FormatInt(ks.now%1000*1000, 10))}, nil
	}
	return nil, ReplyError("ERR unknown command '" + args[0] + "'")
}

// typed returns key's value, which must be of kind k; create makes it
// when missing.
func (ks *keyspace) typed(key string, k valueKind, create bool) (*value, error) {
	v := ks.get(key)
	if v == nil {
		if !create {
			return nil, nil
		}
		v = &value{kind: k}
		if k == kindZSet {
			v.z = map[string]float64{}
		}
		ks.data[key] = v
		return v, nil
	}
	if v.kind != k {
		return nil, errWrongType
	}
	return v, nil
}

func (v *value) hfind(f string) int {
	for i := range v.h {
		if v.h[i].k == f {
			return i
		}
	}
	return -1
}

// hset sets f, reporting whether it is new.
func (v *value) hset(f, val string) bool {
	if i := v.hfind(f); i >= 0 {
		v.h[i].v = val
		return false
	}
	v.h = append(v.h, field{f, val})
	return true
}

func (v *value) zsorted() []string {
	if v == nil {
		return nil
	}
	ms := make([]string, 0, len(v.z))
	for m := range v.z {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool {
		si, sj := v.z[ms[i]], v.z[ms[j]]
		if si != sj {
			return si < sj
		}
		return ms[i] < ms[j]
	})
	return ms
}

// set is SET key value [NX|XX] [PX ms|EX s|KEEPTTL].
func (ks *keyspace) set(a []string) (any, error) {
	if len(a) < 2 {
		return nil, errArgs("SET")
	}
	var nx, xx, keep bool
	var exp int64
	for i := 2; i < len(a); i++ {
		switch strings.ToUpper(a[i]) {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "KEEPTTL":
			keep = true
		case "PX", "EX":
			if i+1 >= len(a) || exp != 0 {
				return nil, errSyntax
			}
			n, err := parseInt(a[i+1])
			if err != nil {
				return nil, err
			}
			if n <= 0 {
				return nil, errExpire
			}
			if strings.EqualFold(a[i], "EX") {
				n *= 1000
			}
			exp = ks.now + n
			i++
		default:
			return nil, errSyntax
		}
	}
	if nx && xx || keep && exp != 0 {
		return nil, errSyntax
	}
	old := ks.get(a[0])
	if nx && old != nil || xx && old == nil {
		return nil, nil
	}
	v := &value{kind: kindString, s: a[1], exp: exp}
	if keep && old != nil {
		v.exp = old.exp
	}
	ks.data[a[0]] = v
	return status("OK"), nil
}

// zadd is ZADD key [NX] score member [score member ...].
func (ks *keyspace) zadd(a []string) (any, error) {
	if len(a) < 3 {
		return nil, errArgs("ZADD")
	}
	key, a := a[0], a[1:]
	nx := false
	if strings.EqualFold(a[0], "NX") {
		nx, a = true, a[1:]
	}
	if len(a) == 0 || len(a)%2 != 0 {
		return nil, errSyntax
	}
	scores := make([]float64, 0, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		s, err := parseScore(a[i])
		if err != nil {
			return nil, errNotFloat
		}
		scores = append(scores, s)
	}
	v, err := ks.typed(key, kindZSet, true)
	if err != nil {
		return nil, err
	}
	var added int64
	for i := 0; i < len(a); i += 2 {
		mem := a[i+1]
		if _, ok := v.z[mem]; ok {
			if nx {
				continue
			}
		} else {
			added++
		}
		v.z[mem] = scores[i/2]
	}
	return added, nil
}

func parseInt(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errNotInt
	}
	return n, nil
}

func parseScore(s string) (float64, error) {
	switch strings.ToLower(s) {
	case "-inf":
		return math.Inf(-1), nil
	case "+inf", "inf":
		return math.Inf(1), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) {
		return 0, errors.New("not a float")
	}
	return f, nil
}
