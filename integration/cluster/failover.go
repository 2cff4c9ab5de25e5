package cluster

// Replicas and failover of the Redis Clusters StartRedisClusters starts
// (WithReplicas).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// FailoverMode is how Failover promotes a replica: the argument of
// CLUSTER FAILOVER.
type FailoverMode string

// The failover modes.
const (
	// FailoverCoordinated is CLUSTER FAILOVER: the primary stops its
	// clients, the replica catches up with the primary's replication
	// offset, and only then takes over, so no acknowledged write is lost.
	// It needs the primary up; with the primary paused or dead it does
	// not happen and Failover reports that.
	FailoverCoordinated FailoverMode = ""
	// FailoverForce is CLUSTER FAILOVER FORCE: no handshake with the
	// primary (which may be paused or dead), but the other primaries
	// vote: it needs a majority of the cluster's primaries up.
	FailoverForce FailoverMode = "FORCE"
	// FailoverTakeover is CLUSTER FAILOVER TAKEOVER: the replica takes a
	// new config epoch and the slots by itself, with no one's agreement.
	FailoverTakeover FailoverMode = "TAKEOVER"
)

func (m FailoverMode) String() string {
	if m == FailoverCoordinated {
		return "coordinated"
	}
	return string(m)
}

// FailoverTimeout bounds Failover when its context has no earlier
// deadline.
var FailoverTimeout = 45 * time.Second

// Failover promotes a replica of the primary that owns slot: it sends
// CLUSTER FAILOVER (with mode's option) to the first of that primary's
// replicas that is up, and waits until every node that is up names the
// replica as slot's owner and the cluster is ready (WaitReady), for at
// most ctx's deadline or FailoverTimeout; it sends the command again each
// time Redis has given up on it (a lost vote on a busy host). It returns
// the new primary.
// The old one, if up, becomes its replica; if paused or down it learns
// that when it comes back (without WithAOF a killed one comes back empty
// and resynchronises from the new primary). With FailoverForce or
// FailoverTakeover, writes the replica had not received are lost: see
// DropReplicas.
func (rc *RedisCluster) Failover(ctx context.Context, slot int, mode FailoverMode) (*Node, error) {
	switch mode {
	case FailoverCoordinated, FailoverForce, FailoverTakeover:
	default:
		return nil, fmt.Errorf("cluster: member %d: unknown failover mode %q", rc.index, string(mode))
	}
	ctx, cancel := context.WithTimeout(ctx, FailoverTimeout)
	defer cancel()
	owner, err := rc.Owner(slot)
	if err != nil {
		return nil, err
	}
	replica, err := rc.replicaOf(owner)
	if err != nil {
		return nil, err
	}
	args := []any{"FAILOVER"}
	if mode != FailoverCoordinated {
		args = append(args, string(mode))
	}
	again, err := rc.failoverRetry(replica)
	if err != nil {
		return nil, err
	}
	if _, err := replica.Do("CLUSTER", args...); err != nil {
		return nil, rc.wrap(replica, "CLUSTER FAILOVER "+mode.String(), err)
	}
	sent := time.Now()
	var last, refused error
	for {
		// A failover Redis gave up on (a vote lost on a busy host, the
		// primary slow to answer) is not tried again by Redis itself:
		// ask again once it has given up and the primaries may vote
		// again. If the replica has been promoted meanwhile, the
		// refusal says so and the next look at the slot sees it.
		if time.Since(sent) >= again {
			_, refused = replica.Do("CLUSTER", args...)
			sent = time.Now()
		}
		o, err := rc.Owner(slot)
		switch {
		case err != nil:
			last = err
		case o != replica:
			last = fmt.Errorf("slot %d is still owned by %s", slot, o.Addr())
		default:
			last = rc.ready()
			if last == nil {
				return replica, nil
			}
		}
		select {
		case <-ctx.Done():
			if refused != nil {
				last = fmt.Errorf("%w; asked again: %w", last, rc.wrap(replica, "CLUSTER FAILOVER "+mode.String(), refused))
			}
			return nil, fmt.Errorf("cluster: member %d: %s failover of slot %d from %s to %s not done: %w (last: %w)%s",
				rc.index, mode, slot, owner.Addr(), replica.Addr(), ctx.Err(), last, rc.logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// failoverRetry returns how long after a CLUSTER FAILOVER Failover sends
// it again. Redis gives up on a manual failover 5 s after the request
// (CLUSTER_MF_TIMEOUT) and does not try again by itself; a replica starts
// a new election only twice the election timeout after its last one
// began, the timeout being twice cluster-node-timeout and at least 2 s;
// and a primary that voted votes for no replica of the same primary for
// twice cluster-node-timeout. A request sent earlier would time out
// without an election.
func (rc *RedisCluster) failoverRetry(replica *Node) (time.Duration, error) {
	kv, err := redis.Strings(replica.Do("CONFIG", "GET", "cluster-node-timeout"))
	if err != nil {
		return 0, rc.wrap(replica, "CONFIG GET cluster-node-timeout", err)
	}
	var ms int
	if len(kv) == 2 {
		ms, err = strconv.Atoi(kv[1])
	}
	if len(kv) != 2 || err != nil || ms < 0 {
		return 0, rc.wrap(replica, "CONFIG GET cluster-node-timeout", fmt.Errorf("unexpected reply %q", kv))
	}
	const mfTimeout = 5 * time.Second
	election := max(2*time.Duration(ms)*time.Millisecond, 2*time.Second)
	return max(mfTimeout, 2*election) + time.Second, nil
}

// DropReplicas closes primary's replication links (CLIENT KILL TYPE
// replica): writes it takes from then on reach its replicas only once
// they reconnect, which they do within about a second unless paused.
// Pausing a replica, dropping it, writing, then pausing or killing the
// primary before resuming the replica leaves the replica without the
// write: a FailoverForce or FailoverTakeover then forgets it.
func (n *Node) DropReplicas() error {
	if _, err := n.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
		return fmt.Errorf("cluster: node %s: CLIENT KILL TYPE replica: %w", n.Addr(), err)
	}
	return nil
}

// Role returns "primary" or "replica", as the node itself says (CLUSTER
// NODES); it needs the node up.
func (rc *RedisCluster) Role(n *Node) (string, error) {
	me, err := rc.self(n)
	if err != nil {
		return "", err
	}
	if me.replica() {
		return "replica", nil
	}
	return "primary", nil
}

// Primaries returns the nodes that are up, not paused, and are primaries
// owning slots, as each says itself. A paused or down primary is not
// listed.
func (rc *RedisCluster) Primaries() ([]*Node, error) {
	var out []*Node
	for _, n := range rc.Nodes {
		if paused, down, _ := n.State(); paused || down {
			continue
		}
		me, err := rc.self(n)
		if err != nil {
			return nil, err
		}
		if !me.replica() && me.slots != "" {
			out = append(out, n)
		}
	}
	return out, nil
}

// Replicas returns the nodes that are up, not paused, and say they
// replicate primary.
func (rc *RedisCluster) Replicas(primary *Node) ([]*Node, error) {
	var out []*Node
	for _, n := range rc.Nodes {
		if n == primary {
			continue
		}
		if paused, down, _ := n.State(); paused || down {
			continue
		}
		me, err := rc.self(n)
		if err != nil {
			return nil, err
		}
		if me.replica() && me.master == primary.id {
			out = append(out, n)
		}
	}
	return out, nil
}

// replicaOf returns the first node that is up, not paused, and says it
// replicates primary.
func (rc *RedisCluster) replicaOf(primary *Node) (*Node, error) {
	rs, err := rc.Replicas(primary)
	if err != nil {
		return nil, err
	}
	if len(rs) > 0 {
		return rs[0], nil
	}
	return nil, fmt.Errorf("cluster: member %d: primary %s has no replica that is up (start the cluster WithReplicas)", rc.index, primary.Addr())
}

// replicate makes node s+i*r+j a replica of primary i, for every j < r.
// A node knows the primary only once the MEET has spread by gossip, so
// it retries for a while.
func (rc *RedisCluster) replicate(s, r int) error {
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < s; i++ {
		primary := rc.Nodes[i]
		for j := 0; j < r; j++ {
			n := rc.Nodes[s+i*r+j]
			for {
				_, err := n.Do("CLUSTER", "REPLICATE", primary.id)
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					return rc.wrap(n, "CLUSTER REPLICATE "+primary.Addr(), err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	return nil
}

// replicaReady checks n, a node that is up: if it is a replica of a
// primary that is up, its replication link is up; and every other node
// that is up agrees with n on n's role and slots (a primary that was
// paused or down through a failover still claims its slots until it
// learns of the newer owner).
// views holds the CLUSTER NODES of every node that is up.
func (rc *RedisCluster) replicaReady(n *Node, views map[*Node]map[string]nodeLine) error {
	me, ok := views[n][n.id]
	if !ok {
		return rc.wrap(n, "CLUSTER NODES", errors.New("no line for the node itself"))
	}
	if me.replica() {
		p := rc.byID(me.master)
		if p == nil {
			return rc.wrap(n, "CLUSTER NODES", fmt.Errorf("replicates unknown node %q", me.master))
		}
		if paused, down, _ := p.State(); !paused && !down {
			info, err := redis.String(n.Do("INFO", "replication"))
			if err != nil {
				return rc.wrap(n, "INFO replication", err)
			}
			if !strings.Contains(info, "master_link_status:up") {
				return rc.wrap(n, "INFO replication", fmt.Errorf("replication link to %s is not up", p.Addr()))
			}
		}
	}
	for _, o := range rc.Nodes {
		if o == n {
			continue
		}
		ov, up := views[o]
		if !up {
			continue
		}
		seen, ok := ov[n.id]
		if !ok {
			return rc.wrap(o, "CLUSTER NODES", fmt.Errorf("does not know %s yet", n.Addr()))
		}
		if seen.replica() != me.replica() || seen.master != me.master || seen.slots != me.slots {
			return rc.wrap(o, "CLUSTER NODES", fmt.Errorf("disagrees with %s on its role or slots", n.Addr()))
		}
	}
	return nil
}

// nodeLine is one line of CLUSTER NODES.
type nodeLine struct {
	flags  []string
	master string // "" for a primary
	slots  string // the slot ranges it owns, space-separated, without migrations
}

func (l nodeLine) replica() bool { return slices.Contains(l.flags, "slave") }

// self returns n's line about itself.
func (rc *RedisCluster) self(n *Node) (nodeLine, error) {
	view, err := rc.view(n)
	if err != nil {
		return nodeLine{}, err
	}
	me, ok := view[n.id]
	if !ok {
		return nodeLine{}, rc.wrap(n, "CLUSTER NODES", errors.New("no line for the node itself"))
	}
	return me, nil
}

// maxNodesReply bounds the CLUSTER NODES reply read from a node.
const maxNodesReply = 1 << 20

// view returns n's CLUSTER NODES by node ID.
func (rc *RedisCluster) view(n *Node) (map[string]nodeLine, error) {
	text, err := redis.String(n.Do("CLUSTER", "NODES"))
	if err != nil {
		return nil, rc.wrap(n, "CLUSTER NODES", err)
	}
	if len(text) > maxNodesReply {
		return nil, rc.wrap(n, "CLUSTER NODES", fmt.Errorf("reply of %d bytes", len(text)))
	}
	out := make(map[string]nodeLine)
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, rc.wrap(n, "CLUSTER NODES", fmt.Errorf("unexpected line %q", line))
		}
		l := nodeLine{flags: strings.Split(f[2], ",")}
		if f[3] != "-" {
			l.master = f[3]
		}
		var slots []string
		for _, s := range f[8:] {
			if !strings.HasPrefix(s, "[") {
				slots = append(slots, s)
			}
		}
		l.slots = strings.Join(slots, " ")
		out[f[0]] = l
	}
	return out, nil
}

// byID returns the node with cluster node ID id, or nil.
func (rc *RedisCluster) byID(id string) *Node {
	for _, n := range rc.Nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

// logs returns every node's last log lines, for an error message.
func (rc *RedisCluster) logs() string {
	var b strings.Builder
	for _, n := range rc.Nodes {
		fmt.Fprintf(&b, "\n\tnode %s:%s", n.Addr(), n.node.logs())
	}
	return b.String()
}
