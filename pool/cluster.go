package pool

import (
	"fmt"
	"net"
	"strings"

	"github.com/quorumlock/quorumlock/internal/slots"
)

// Quorum members that are Redis Clusters.
//
// A member written cluster://HOST:PORT[+HOST:PORT...] is one Redis Cluster
// reached through those seed nodes. ParseClusterURL checks the form; the
// redlock package's cluster transport and the redlock CLI share it, and
// internal/slots the checks of what a cluster says about its nodes
// (CLUSTER SLOTS, MOVED, ASK): every such address is untrusted bytes.

// ClusterScheme starts a member that is a Redis Cluster.
const ClusterScheme = "cluster://"

// maxClusterSeeds bounds the seed list of one cluster member.
const maxClusterSeeds = 64

// ErrBadCluster is what ParseClusterURL returns for a malformed member,
// and what the checks of a cluster's replies (CLUSTER SLOTS, MOVED, ASK)
// return for malformed input.
var ErrBadCluster = slots.ErrBadCluster

// ClusterSpec is a parsed cluster:// member.
type ClusterSpec struct {
	// Seeds are the seed nodes, host:port in net.JoinHostPort's form, in
	// the order given.
	Seeds []string
	// Loopback: every seed is on this machine's loopback. Then only
	// loopback nodes the cluster names are dialed; otherwise no loopback
	// node is (see Dialable).
	Loopback bool
}

// IsClusterURL reports whether s names a member that is a Redis Cluster.
func IsClusterURL(s string) bool { return strings.HasPrefix(s, ClusterScheme) }

// ParseClusterURL parses cluster://HOST:PORT[+HOST:PORT...]. It takes no
// credentials (an '@' is refused without quoting the member): give them
// with WithAuth, which applies to every node.
func ParseClusterURL(spec string) (ClusterSpec, error) {
	rest, ok := strings.CutPrefix(spec, ClusterScheme)
	if !ok {
		return ClusterSpec{}, fmt.Errorf("%w: %q is not %sHOST:PORT[+HOST:PORT...]", ErrBadCluster, slots.Short(spec), ClusterScheme)
	}
	if strings.Contains(rest, "@") {
		return ClusterSpec{}, fmt.Errorf("%w: it has '@' in it (not quoted here, in case it holds a password): cluster members take no credentials in the URL; give each seed as host:port and credentials with pool.WithAuth", ErrBadCluster)
	}
	parts := strings.Split(rest, "+")
	if len(parts) > maxClusterSeeds {
		return ClusterSpec{}, fmt.Errorf("%w: %d seeds, at most %d", ErrBadCluster, len(parts), maxClusterSeeds)
	}
	var cs ClusterSpec
	cs.Loopback = true
	for _, s := range parts {
		addr, err := slots.CheckNodeAddr(s, "")
		if err != nil {
			return ClusterSpec{}, fmt.Errorf("%w: %q: seed %q: %w", ErrBadCluster, slots.Short(spec), slots.Short(s), err)
		}
		cs.Seeds = append(cs.Seeds, addr)
		cs.Loopback = cs.Loopback && isLoopback(addr)
	}
	return cs, nil
}

// isLoopback reports whether host:port is on this machine's loopback.
func isLoopback(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// Dialable checks an address the cluster named (CLUSTER SLOTS, MOVED,
// ASK) before it is dialed. A member given by loopback seeds is a cluster
// on this machine: a node it announces elsewhere (a container's address,
// cluster-announce-ip unset, or a hostile node's redirection) is not
// dialed. A member given by other seeds is on other machines: a node it
// announces on this machine's loopback is no node of it (and could be any
// local service), and is not dialed either.
func (cs ClusterSpec) Dialable(addr string) error {
	switch {
	case cs.Loopback && !isLoopback(addr):
		return fmt.Errorf("node %s is announced off loopback while the seeds are on loopback: not dialed; set cluster-announce-ip (or cluster-announce-hostname) to an address clients dial", addr)
	case !cs.Loopback && isLoopback(addr):
		return fmt.Errorf("node %s is announced on loopback while the seeds are not: not dialed; set cluster-announce-ip (or cluster-announce-hostname) to an address clients dial", addr)
	}
	return nil
}

// Deprecated names: checks of a cluster's replies that only the redlock
// transports and CLI use. They go in the next minor release.

// ClusterSlots is the number of hash slots of a Redis Cluster.
//
// Deprecated: it is Redis's constant, 16384; the library no longer
// exports it.
const ClusterSlots = slots.ClusterSlots

// MaxClusterSeeds bounds the seed list of one cluster member.
//
// Deprecated: ParseClusterURL applies the bound (64) and says so.
const MaxClusterSeeds = maxClusterSeeds

// MaxClusterNodes bounds how many distinct primaries one cluster member
// may name.
//
// Deprecated: the library's cluster routing applies the bound (500).
const MaxClusterNodes = slots.MaxClusterNodes

// SlotRange is one range of a CLUSTER SLOTS reply.
//
// Deprecated: the library reads CLUSTER SLOTS itself; no replacement.
type SlotRange = slots.Range

// CheckNodeAddr checks a node's host:port and returns it in
// net.JoinHostPort's form.
//
// Deprecated: use ClusterSpec.Dialable for an address a member may dial;
// the library checks the addresses a cluster names itself.
func CheckNodeAddr(hostport, sender string) (string, error) {
	return slots.CheckNodeAddr(hostport, sender)
}

// ParseClusterSlots checks a CLUSTER SLOTS reply from the node at sender.
//
// Deprecated: the library reads CLUSTER SLOTS itself; no replacement.
func ParseClusterSlots(v any, sender string) ([]SlotRange, error) {
	return slots.ParseClusterSlots(v, sender)
}

// ParseRedirect reads a MOVED or ASK error reply.
//
// Deprecated: the library follows redirections itself; no replacement.
func ParseRedirect(msg, sender string) (ask bool, slot int, addr string, ok bool, err error) {
	return slots.ParseRedirect(msg, sender)
}

// IsLoopback reports whether host:port is on this machine's loopback.
//
// Deprecated: use ClusterSpec.Dialable, which applies it; no replacement.
func IsLoopback(addr string) bool { return isLoopback(addr) }
