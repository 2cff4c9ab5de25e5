// Package slots checks what the nodes of a Redis Cluster say about slots
// and nodes — CLUSTER SLOTS replies, MOVED and ASK redirections, node
// addresses — for the redigo transports' cluster routing and the redlock
// CLI. Every such byte is untrusted: each check bounds what it keeps and
// quotes nothing raw.
package slots

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = 16384

// MaxClusterNodes bounds how many distinct primaries one cluster member
// may name (CLUSTER SLOTS, redirections): a cluster of more is refused
// rather than given a connection per node without bound.
const MaxClusterNodes = 500

// ErrBadCluster is what ParseClusterSlots and ParseRedirect return for
// malformed input (package pool's ErrBadCluster is this error).
var ErrBadCluster = errors.New("pool: bad cluster member")

// hostRE is what a host in a seed or a reply may be: a DNS name or an IP
// address (IPv6 as net.SplitHostPort leaves it).
var hostRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,253}$`)

// CheckNodeAddr checks host:port (from a seed or a node's reply) and
// returns it in net.JoinHostPort's form. An empty host is the host of
// sender, as CLUSTER SLOTS and MOVED mean it.
func CheckNodeAddr(hostport, sender string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", errors.New("not host:port")
	}
	if host == "" && sender != "" {
		host, _, _ = net.SplitHostPort(sender)
	}
	return checkNodeHostPort(host, port)
}

func checkNodeHostPort(host, port string) (string, error) {
	if !hostRE.MatchString(host) {
		return "", errors.New("not a host name or IP address")
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return "", errors.New("port is not 1..65535")
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// Range is one range of CLUSTER SLOTS: its primary's address (checked
// by CheckNodeAddr, not yet by Dialable) and node ID ("" when not given
// or malformed).
type Range struct {
	Lo, Hi int
	Addr   string
	ID     string
}

// ParseClusterSlots checks a CLUSTER SLOTS reply (as redigo gives it) from
// the node at sender. Each entry is [lo, hi, [host, port, id, ...],
// replicas...]; only the primary is kept. It refuses more ranges than
// there are slots and more than MaxClusterNodes distinct primaries; the
// reply's size in bytes is bounded by the connection's guard (Limits).
func ParseClusterSlots(v any, sender string) ([]Range, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: CLUSTER SLOTS: "+format, append([]any{ErrBadCluster}, args...)...)
	}
	entries, err := redis.Values(v, nil)
	if err != nil {
		return nil, bad("%v", err)
	}
	if len(entries) > ClusterSlots {
		return nil, bad("%d ranges, more than there are slots", len(entries))
	}
	out := make([]Range, 0, len(entries))
	nodes := map[string]bool{}
	for i, e := range entries {
		f, err := redis.Values(e, nil)
		if err != nil || len(f) < 3 {
			return nil, bad("entry %d is not [start, end, primary, ...]", i)
		}
		lo, err1 := redis.Int(f[0], nil)
		hi, err2 := redis.Int(f[1], nil)
		if err1 != nil || err2 != nil || lo < 0 || hi < lo || hi >= ClusterSlots {
			return nil, bad("entry %d: not a slot range", i)
		}
		p, err := redis.Values(f[2], nil)
		if err != nil || len(p) < 2 {
			return nil, bad("entry %d: no primary [host, port, ...]", i)
		}
		host, err1 := redis.String(p[0], nil)
		port, err2 := redis.Int(p[1], nil)
		if err1 != nil || err2 != nil {
			return nil, bad("entry %d: primary is not [host, port, ...]", i)
		}
		if host == "?" {
			return nil, bad("slots %d-%d: the primary's endpoint is unknown (\"?\"): set cluster-announce-hostname or cluster-preferred-endpoint-type", lo, hi)
		}
		if host == "" {
			host, _, _ = net.SplitHostPort(sender)
		}
		addr, err := checkNodeHostPort(host, strconv.Itoa(port))
		if err != nil {
			return nil, bad("slots %d-%d: primary %s: %v", lo, hi, strconv.Quote(Short(host)), err)
		}
		if !nodes[addr] {
			if len(nodes) >= MaxClusterNodes {
				return nil, bad("more than %d primaries", MaxClusterNodes)
			}
			nodes[addr] = true
		}
		r := Range{Lo: lo, Hi: hi, Addr: addr}
		if len(p) >= 3 {
			if id, err := redis.String(p[2], nil); err == nil && len(id) == 40 && strings.Trim(id, "0123456789abcdef") == "" {
				r.ID = id
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// redirRE is a MOVED or ASK error reply: the kind, the slot, the node.
var redirRE = regexp.MustCompile(`^(MOVED|ASK) ([0-9]{1,5}) (\S{1,300})$`)

// ParseRedirect reads a MOVED or ASK error reply ("MOVED 3999
// 127.0.0.1:6381"): ok is false for any other message. The node's address
// is checked by CheckNodeAddr (an empty host is the sender's, as Redis 7
// may send it); a malformed one is an error, not a redirection to follow.
func ParseRedirect(msg, sender string) (ask bool, slot int, addr string, ok bool, err error) {
	if !strings.HasPrefix(msg, "MOVED ") && !strings.HasPrefix(msg, "ASK ") {
		return false, 0, "", false, nil
	}
	sm := redirRE.FindStringSubmatch(msg)
	if sm == nil {
		return false, 0, "", true, fmt.Errorf("%w: a malformed redirection (%d bytes, not quoted)", ErrBadCluster, len(msg))
	}
	slot, _ = strconv.Atoi(sm[2])
	if slot >= ClusterSlots {
		return false, 0, "", true, fmt.Errorf("%w: a redirection to slot %d", ErrBadCluster, slot)
	}
	addr, err = CheckNodeAddr(sm[3], sender)
	if err != nil {
		return false, 0, "", true, fmt.Errorf("%w: a redirection to %s: %w", ErrBadCluster, strconv.Quote(Short(sm[3])), err)
	}
	return sm[1] == "ASK", slot, addr, true, nil
}

// Short cuts an untrusted string for an error message.
func Short(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
