package main

// Quorum members that are Redis Clusters, for status and doctor.
//
// A member written cluster://HOST:PORT[+HOST:PORT...] is a Redis Cluster
// reached through those seed nodes. exec, elect, leader and bench lock
// through the library's cluster transport (redigo.NewFromAddrs); status
// and doctor, which report each node, read it with plain commands: CLUSTER SLOTS (from the first
// seed that answers) says which node owns a key's slot, the key is read
// there, and a MOVED reply (the slot moved meanwhile) is followed once.
// Every reply is untrusted: its size is bounded by the pool's guard, and
// every slot number, host and port in it is checked before it is used or
// dialed.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	keyslot "github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/slots"
	"github.com/quorumlock/quorumlock/pool"
)

// clusterScheme starts a member that is a Redis Cluster.
const clusterScheme = pool.ClusterScheme

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = slots.ClusterSlots

// clusterMember is one quorum member that is a Redis Cluster. It is used
// by one command at a time (not safe for concurrent use).
type clusterMember struct {
	spec  string           // as given, seeds joined with '+'
	cs    pool.ClusterSpec // its seeds, checked
	seeds []string         // host:port (cs.Seeds)
	opts  []pool.Option    // for every node's pool (TLS, timeouts)
	nodes map[string]*pool.RedisPool
	// failed are the nodes that did not answer status, by address: asked
	// once, skipped for the keys after.
	failed map[string]string
	slots  []slotRange // CLUSTER SLOTS as last read; nil until read
	from   string      // the node slots was read from
}

// slotRange is one range of CLUSTER SLOTS: its primary's address and ID.
type slotRange struct {
	lo, hi int
	addr   string // host:port, checked
	id     string
}

// parseClusterMember parses cluster://HOST:PORT[+HOST:PORT...]
// (pool.ParseClusterURL, which the library's NewFromAddrs shares).
func parseClusterMember(spec string, opts []pool.Option) (*clusterMember, error) {
	cs, err := pool.ParseClusterURL(spec)
	if err != nil {
		return nil, err
	}
	return &clusterMember{spec: spec, cs: cs, seeds: cs.Seeds, opts: opts,
		nodes: map[string]*pool.RedisPool{}, failed: map[string]string{}}, nil
}

// dialable checks an address the cluster named (CLUSTER SLOTS, MOVED)
// before it is dialed (pool.ClusterSpec.Dialable: loopback seeds are
// followed only to loopback, other seeds never to loopback).
func (m *clusterMember) dialable(addr string) error { return m.cs.Dialable(addr) }

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

// parseSlots checks a CLUSTER SLOTS reply from the node at sender
// (slots.ParseClusterSlots).
func parseSlots(v any, sender string) ([]slotRange, error) {
	rs, err := slots.ParseClusterSlots(v, sender)
	if err != nil {
		return nil, err
	}
	out := make([]slotRange, len(rs))
	for i, r := range rs {
		out[i] = slotRange{lo: r.Lo, hi: r.Hi, addr: r.Addr, id: r.ID}
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
	addr, err := slots.CheckNodeAddr(sm[2], "")
	if err != nil {
		return ""
	}
	return addr
}

// clusterReport is what doctor found on a member that is a Redis Cluster:
// the "cluster" object of a member of doctor --json (docs/operations.md).
type clusterReport struct {
	From          string    `json:"from,omitempty"`     // the node CLUSTER INFO and SLOTS came from
	State         string    `json:"cluster_state"`      // "ok", "fail", or "" when no seed answered
	SlotsAssigned int       `json:"slots_assigned"`     // CLUSTER INFO's cluster_slots_assigned
	SlotsFail     int       `json:"slots_fail"`         // cluster_slots_fail
	SlotsPFail    int       `json:"slots_pfail"`        // cluster_slots_pfail
	KnownNodes    int       `json:"known_nodes"`        // cluster_known_nodes
	SlotsCovered  int       `json:"slots_covered"`      // slots with a primary in CLUSTER SLOTS
	KeyNode       string    `json:"key_node,omitempty"` // with --key: the primary owning its slot, whose ACL was checked
	Nodes         []*report `json:"nodes"`              // each primary, checked as a master is
}

// examineCluster checks a member that is a Redis Cluster: its state and
// slot coverage as a seed sees them, the addresses its primaries
// announce (on loopback, for a member given by loopback seeds), and each
// primary as doctor checks a master. A member whose
// cluster is not ok, leaves slots uncovered or has a primary that FAILs,
// FAILs: the keys of some slots cannot be locked on it.
func examineCluster(ctx context.Context, m *clusterMember, timeout time.Duration, rc rateCheck) *report {
	// With --key, the ACL probe runs on the primary that owns the key's
	// slot (the probe shares it), the node every lock on the key uses.
	key := rc.aclKey
	rc.aclKey = ""
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
	if key != "" {
		slot := keyslot.Slot(key)
		for _, s := range m.slots {
			if slot >= s.lo && slot <= s.hi {
				cr.KeyNode = s.addr
				break
			}
		}
		if cr.KeyNode == "" {
			r.Problems = append(r.Problems, fmt.Sprintf("--key %s: its slot %d has no primary, so its ACL was not checked on this member", display(key), slot))
		}
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
		nrc := rc
		if a == cr.KeyNode {
			nrc.aclKey = key
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i] = examine(ctx, p, timeout, nrc)
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
