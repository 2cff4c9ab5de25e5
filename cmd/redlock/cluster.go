package main

// Quorum members that are Redis Clusters, for status and doctor.
//
// A member written cluster://HOST:PORT[+HOST:PORT...] is a Redis Cluster
// reached through those seed nodes. The lock engine has no cluster
// transport on redigo yet, so exec and bench refuse such a member; status
// and doctor read it with plain commands: CLUSTER SLOTS (from the first
// seed that answers) says which node owns a key's slot, the key is read
// there, and a MOVED reply (the slot moved meanwhile) is followed once.
// Every reply is untrusted: its size is bounded by the pool's guard, and
// every slot number, host and port in it is checked before it is used or
// dialed.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/pool"
)

// clusterScheme starts a member that is a Redis Cluster.
const clusterScheme = "cluster://"

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// maxSeeds bounds the seed list of one cluster member.
const maxSeeds = 64

// clusterMember is one quorum member that is a Redis Cluster. It is used
// by one command at a time (not safe for concurrent use).
type clusterMember struct {
	spec  string        // as given, seeds joined with '+'
	seeds []string      // host:port
	opts  []pool.Option // for every node's pool (TLS, timeouts)
	nodes map[string]*pool.RedisPool
	// failed are the nodes that did not answer status, by address: asked
	// once, skipped for the keys after.
	failed map[string]string
	slots  []slotRange // CLUSTER SLOTS as last read; nil until read
	from   string      // the node slots was read from
	// loopback is set when every seed is a loopback address: then only
	// loopback addresses the cluster names are dialed.
	loopback bool
}

// slotRange is one range of CLUSTER SLOTS: its primary's address and ID.
type slotRange struct {
	lo, hi int
	addr   string // host:port, checked
	id     string
}

// parseClusterMember parses cluster://HOST:PORT[+HOST:PORT...].
func parseClusterMember(spec string, opts []pool.Option) (*clusterMember, error) {
	rest, ok := strings.CutPrefix(spec, clusterScheme)
	if !ok {
		return nil, fmt.Errorf("member %q is not %sHOST:PORT[+HOST:PORT...]", spec, clusterScheme)
	}
	if strings.Contains(rest, "@") {
		return nil, errors.New("a cluster member has '@' in it (not quoted here, in case it holds a password): cluster members take no credentials yet; give each seed as host:port")
	}
	parts := strings.Split(rest, "+")
	if len(parts) > maxSeeds {
		return nil, fmt.Errorf("cluster member %q: %d seeds, at most %d", spec, len(parts), maxSeeds)
	}
	m := &clusterMember{spec: spec, opts: opts, nodes: map[string]*pool.RedisPool{}, failed: map[string]string{}}
	for _, s := range parts {
		addr, err := checkAddr(s, "")
		if err != nil {
			return nil, fmt.Errorf("cluster member %q: seed %q: %w", spec, s, err)
		}
		m.seeds = append(m.seeds, addr)
	}
	m.loopback = true
	for _, a := range m.seeds {
		m.loopback = m.loopback && isLoopback(a)
	}
	return m, nil
}

// isLoopback reports whether host:port is on this machine's loopback.
func isLoopback(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// dialable checks an address the cluster named (CLUSTER SLOTS, MOVED)
// before it is dialed. A member given by loopback seeds is a cluster on
// this machine: a node it announces elsewhere (a container's address,
// cluster-announce-ip unset) is one its clients cannot count on reaching.
// A member given by other seeds is on other machines: a node it announces
// on this machine's loopback is no node of it (and could be any local
// service). Neither is dialed.
func (m *clusterMember) dialable(addr string) error {
	switch {
	case m.loopback && !isLoopback(addr):
		return fmt.Errorf("node %s is announced off loopback while the seeds are on loopback: not dialed; set cluster-announce-ip (or cluster-announce-hostname) to an address clients dial", addr)
	case !m.loopback && isLoopback(addr):
		return fmt.Errorf("node %s is announced on loopback while the seeds are not: not dialed; set cluster-announce-ip (or cluster-announce-hostname) to an address clients dial", addr)
	}
	return nil
}

// hostRE is what a host in a seed or a reply may be: a DNS name or an IP
// address (IPv6 as net.SplitHostPort leaves it).
var hostRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,253}$`)

// checkAddr checks host:port (from the command line or a node's reply)
// and returns it in net.JoinHostPort's form. An empty host is the host of
// sender, as CLUSTER SLOTS means it.
func checkAddr(hostport, sender string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", errors.New("not host:port")
	}
	if host == "" && sender != "" {
		host, _, _ = net.SplitHostPort(sender)
	}
	return checkHostPort(host, port)
}

func checkHostPort(host, port string) (string, error) {
	if !hostRE.MatchString(host) {
		return "", errors.New("not a host name or IP address")
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return "", errors.New("port is not 1..65535")
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// node returns the pool of the node at addr (checked), opening it once.
func (m *clusterMember) node(addr string) (*pool.RedisPool, error) {
	if p, ok := m.nodes[addr]; ok {
		return p, nil
	}
	p, err := pool.New(addr, m.opts...)
	if err != nil {
		return nil, err
	}
	m.nodes[addr] = p
	return p, nil
}

func (m *clusterMember) close() {
	for _, p := range m.nodes {
		p.Close()
	}
}

// do runs one command on the node at addr, bounded by timeout.
func (m *clusterMember) do(ctx context.Context, addr string, timeout time.Duration, cmd string, args ...any) (any, error) {
	p, err := m.node(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := p.GetContext(ctx)
	if err != nil {
		return nil, p.RedactError(err)
	}
	defer c.Close()
	v, err := redis.DoContext(c, ctx, cmd, args...)
	return v, p.RedactError(err)
}

// readSlots reads CLUSTER SLOTS from the first seed that answers (from,
// when not empty, first) and keeps it.
func (m *clusterMember) readSlots(ctx context.Context, timeout time.Duration, from string) error {
	order := m.seeds
	if from != "" {
		order = append([]string{from}, m.seeds...)
	}
	var errs []error
	for _, addr := range order {
		v, err := m.do(ctx, addr, timeout, "CLUSTER", "SLOTS")
		if err == nil {
			var slots []slotRange
			if slots, err = parseSlots(v, addr); err == nil {
				m.slots, m.from = slots, addr
				return nil
			}
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("cluster %s: no seed told the slots' owners: %w", m.spec, errors.Join(errs...))
}

// parseSlots checks a CLUSTER SLOTS reply from the node at sender. Each
// entry is [lo, hi, [host, port, id, ...], replicas...]; only the primary
// is kept.
func parseSlots(v any, sender string) ([]slotRange, error) {
	entries, err := redis.Values(v, nil)
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	if len(entries) > clusterSlots {
		return nil, fmt.Errorf("CLUSTER SLOTS: %d ranges, more than there are slots", len(entries))
	}
	out := make([]slotRange, 0, len(entries))
	for i, e := range entries {
		f, err := redis.Values(e, nil)
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS: entry %d is not [start, end, primary, ...]", i)
		}
		lo, err1 := redis.Int(f[0], nil)
		hi, err2 := redis.Int(f[1], nil)
		if err1 != nil || err2 != nil || lo < 0 || hi < lo || hi >= clusterSlots {
			return nil, fmt.Errorf("CLUSTER SLOTS: entry %d: not a slot range", i)
		}
		p, err := redis.Values(f[2], nil)
		if err != nil || len(p) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS: entry %d: no primary [host, port, ...]", i)
		}
		host, err1 := redis.String(p[0], nil)
		port, err2 := redis.Int(p[1], nil)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("CLUSTER SLOTS: entry %d: primary is not [host, port, ...]", i)
		}
		if host == "?" {
			return nil, fmt.Errorf("CLUSTER SLOTS: slots %d-%d: the primary's endpoint is unknown (\"?\"): set cluster-announce-hostname or cluster-preferred-endpoint-type", lo, hi)
		}
		if host == "" {
			host, _, _ = net.SplitHostPort(sender)
		}
		addr, err := checkHostPort(host, strconv.Itoa(port))
		if err != nil {
			return nil, fmt.Errorf("CLUSTER SLOTS: slots %d-%d: primary %s: %w", lo, hi, strconv.Quote(display(short64(host))), err)
		}
		r := slotRange{lo: lo, hi: hi, addr: addr}
		if len(p) >= 3 {
			if id, err := redis.String(p[2], nil); err == nil && len(id) == 40 && strings.Trim(id, "0123456789abcdef") == "" {
				r.id = id
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// short64 cuts an untrusted string for an error message.
func short64(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// owner returns the address of the node that owns slot, reading CLUSTER
// SLOTS first when it was not read yet.
func (m *clusterMember) owner(ctx context.Context, timeout time.Duration, slot int) (string, error) {
	if m.slots == nil {
		if err := m.readSlots(ctx, timeout, ""); err != nil {
			return "", err
		}
	}
	for _, r := range m.slots {
		if slot >= r.lo && slot <= r.hi {
			if err := m.dialable(r.addr); err != nil {
				return "", fmt.Errorf("cluster %s: slot %d: %w", m.spec, slot, err)
			}
			return r.addr, nil
		}
	}
	return "", fmt.Errorf("cluster %s: slot %d has no owner (CLUSTER SLOTS from %s): the cluster does not cover every slot", m.spec, slot, m.from)
}

// movedRE finds a MOVED redirection in an error from a node.
var movedRE = regexp.MustCompile(`\bMOVED ([0-9]{1,5}) (\S{1,300})`)

// moved returns the node a MOVED error for slot names, checked, or "".
func moved(err error, slot int) string {
	if err == nil {
		return ""
	}
	sm := movedRE.FindStringSubmatch(err.Error())
	if sm == nil || sm[1] != strconv.Itoa(slot) {
		return ""
	}
	addr, err := checkAddr(sm[2], "")
	if err != nil {
		return ""
	}
	return addr
}

// clusterReport is what doctor found on a member that is a Redis Cluster:
// the "cluster" object of a member of doctor --json (docs/operations.md).
type clusterReport struct {
	From          string    `json:"from,omitempty"` // the node CLUSTER INFO and SLOTS came from
	State         string    `json:"cluster_state"`  // "ok", "fail", or "" when no seed answered
	SlotsAssigned int       `json:"slots_assigned"` // CLUSTER INFO's cluster_slots_assigned
	SlotsFail     int       `json:"slots_fail"`     // cluster_slots_fail
	SlotsPFail    int       `json:"slots_pfail"`    // cluster_slots_pfail
	KnownNodes    int       `json:"known_nodes"`    // cluster_known_nodes
	SlotsCovered  int       `json:"slots_covered"`  // slots with a primary in CLUSTER SLOTS
	Nodes         []*report `json:"nodes"`          // each primary, checked as a master is
}

// examineCluster checks a member that is a Redis Cluster: its state and
// slot coverage as a seed sees them, the addresses its primaries
// announce (on loopback, for a member given by loopback seeds), and each
// primary as doctor checks a master. A member whose
// cluster is not ok, leaves slots uncovered or has a primary that FAILs,
// FAILs: the keys of some slots cannot be locked on it.
func examineCluster(ctx context.Context, m *clusterMember, timeout time.Duration, rc rateCheck) *report {
	r := &report{Addr: m.spec, Cluster: &clusterReport{Nodes: []*report{}}}
	cr := r.Cluster
	ctx, cancel := context.WithTimeout(ctx, max(2*time.Second, 10*timeout))
	defer cancel()
	step := max(timeout, statusTimeout)
	if err := m.readSlots(ctx, step, ""); err != nil {
		r.Error = err.Error()
		r.Problems = append(r.Problems, r.Error)
		return r
	}
	r.Reachable = true
	cr.From = m.from
	info, err := redis.String(m.do(ctx, m.from, step, "CLUSTER", "INFO"))
	if err != nil {
		r.Problems = append(r.Problems, fmt.Sprintf("CLUSTER INFO on %s: %v", m.from, err))
	} else {
		cr.State = short64(infoField(info, "cluster_state"))
		num := func(name string) int {
			n, err := strconv.Atoi(infoField(info, name))
			if err != nil || n < 0 {
				return -1
			}
			return n
		}
		cr.SlotsAssigned, cr.SlotsFail, cr.SlotsPFail, cr.KnownNodes = num("cluster_slots_assigned"), num("cluster_slots_fail"), num("cluster_slots_pfail"), num("cluster_known_nodes")
		if cr.State != "ok" {
			r.Problems = append(r.Problems, fmt.Sprintf("cluster_state is %q (as %s sees it): the cluster refuses commands; see CLUSTER INFO", cr.State, m.from))
		}
		if cr.SlotsFail > 0 || cr.SlotsPFail > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("%d slots fail and %d may fail (their primary is not reachable from %s): keys in them cannot be locked on this member", cr.SlotsFail, cr.SlotsPFail, m.from))
		}
	}
	// Coverage in one pass over the ranges and one over the slots (a
	// reply of 16384 ranges each of every slot costs no more).
	var diff [clusterSlots + 1]int
	for _, s := range m.slots {
		diff[s.lo]++
		diff[s.hi+1]--
	}
	var covered [clusterSlots]bool
	for i, n := 0, 0; i < clusterSlots; i++ {
		n += diff[i]
		covered[i] = n > 0
	}
	var gaps []string
	for i := 0; i < clusterSlots; i++ {
		if covered[i] {
			cr.SlotsCovered++
			continue
		}
		j := i
		for j+1 < clusterSlots && !covered[j+1] {
			j++
		}
		if len(gaps) < 5 {
			gaps = append(gaps, fmt.Sprintf("%d-%d", i, j))
		}
		i = j
	}
	if cr.SlotsCovered < clusterSlots {
		r.Problems = append(r.Problems, fmt.Sprintf("%d of %d slots have no primary (%s): keys in them cannot be locked on this member; assign them (CLUSTER ADDSLOTS, or redis-cli --cluster fix)",
			clusterSlots-cr.SlotsCovered, clusterSlots, strings.Join(gaps, ", ")))
	}
	var addrs []string
	seen := map[string]bool{}
	for _, s := range m.slots {
		if !seen[s.addr] {
			seen[s.addr] = true
			addrs = append(addrs, s.addr)
		}
	}
	// Each primary, checked as a master, all at once.
	nodes := make([]*report, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		// Announced addresses: clients dial what CLUSTER SLOTS and MOVED
		// name.
		if err := m.dialable(a); err != nil {
			nodes[i] = &report{Addr: a, Error: err.Error(), Problems: []string{err.Error()}}
			continue
		}
		p, err := m.node(a)
		if err != nil {
			nodes[i] = &report{Addr: a, Error: err.Error(), Problems: []string{err.Error()}}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i] = examine(ctx, p, timeout, rc)
		}()
	}
	wg.Wait()
	for _, n := range nodes {
		n.finish()
		switch n.Verdict {
		case "FAIL":
			r.Problems = append(r.Problems, fmt.Sprintf("primary %s FAILs (below): keys in its slots cannot be locked safely on this member", n.Addr))
		case "WARN":
			r.Warnings = append(r.Warnings, fmt.Sprintf("primary %s has warnings (below)", n.Addr))
		}
		cr.Nodes = append(cr.Nodes, n)
	}
	return r
}
