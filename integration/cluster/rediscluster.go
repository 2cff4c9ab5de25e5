package cluster

// Quorum members that are Redis Clusters.
//
// StartRedisClusters starts k independent Redis Clusters (one per quorum
// member), each of s primaries. Every node is a redis-server started with
// cluster-enabled (a process on 127.0.0.1 with a bus port of its own, or a
// container on the cluster's network with its port published on
// 127.0.0.1), and it announces an address the test can dial, so CLUSTER
// SLOTS, MOVED and ASK name only 127.0.0.1 addresses. The
// slots are split evenly by hand (CLUSTER ADDSLOTSRANGE, a distinct config
// epoch per node, CLUSTER MEET), which is what `redis-cli --cluster create`
// does, without its prompt; Start returns once every node reports
// cluster_state:ok and knows all s nodes.
//
// The nodes run with cluster-require-full-coverage no: a paused or killed
// node makes only its own slots unavailable, as a lost master makes only
// one member of a quorum unavailable. A killed primary comes back on its
// address with its node ID and slots (nodes.conf is kept in its
// directory) and, without WithAOF, without its keys — the amnesia of
// docs/safety.md.
//
// With WithReplicas(r) every primary has r replicas. Failover promotes a
// replica of a slot's owner (CLUSTER FAILOVER, coordinated, or FORCE or
// TAKEOVER when the primary is paused or dead) and waits until the slot
// map names it; DropReplicas cuts a primary's replication links, so a
// write can be made that its replicas never receive — a failover then
// forgets it, the failover form of the amnesia hazard. Redis Cluster also
// fails over by itself once a primary has been unreachable for
// cluster-node-timeout (3 s here) and a little more.
//
// MigrateSlot moves one hash slot from its owner to another node of the
// same cluster while clients run, the way redis-cli --cluster reshard
// does: CLUSTER SETSLOT IMPORTING and MIGRATING, MIGRATE of the slot's
// keys in batches, then CLUSTER SETSLOT NODE on every node. While it runs,
// clients get ASK for keys already moved (or not yet created) and MOVED
// once it is done.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// RedisCluster is one quorum member that is a Redis Cluster, started by
// StartRedisClusters. Its nodes' fault controls are those of Master.
// Nodes holds every node: the s primaries it was started with first, then
// their replicas (those of the first primary, then of the second...);
// after a failover a replica may be a primary and a primary a replica
// (Primaries and Role ask the cluster).
type RedisCluster struct {
	index int
	Nodes []*Node
}

// Node is one node of a RedisCluster, a primary or a replica: a Master
// with the cluster's node ID.
type Node struct {
	*Master
	id string
	// peer returns where the other nodes of its cluster reach it: the host
	// and client port (for MIGRATE) and bus port (for CLUSTER MEET).
	peer func() (host string, port, bus int, err error)
}

// ID returns the node's cluster node ID.
func (n *Node) ID() string { return n.id }

// StartRedisClusters starts k Redis Clusters of s primaries each and
// returns once every cluster is ready (cluster_state:ok on every node). It
// fails the test if they cannot be started. The backend is chosen as for
// Start.
//
// With the Docker backend each cluster is a network of its own: the nodes
// gossip on it (bus port 16379, at their addresses on that network), and
// each node's client port is published on 127.0.0.1. A node announces to
// clients the address they dial — cluster-announce-hostname 127.0.0.1,
// cluster-announce-port its published port, cluster-preferred-endpoint-type
// hostname — so CLUSTER SLOTS, MOVED and ASK never name a container
// address, while the bus still uses the network's addresses (announcing
// 127.0.0.1 as the node's IP would make every node gossip with itself).
// Each container listens on its published port itself (not 6379), so a
// replica reaches its primary at the primary's network address and
// announced port.
func StartRedisClusters(t testing.TB, k, s int, opts ...Option) []*RedisCluster {
	t.Helper()
	redistest.SkipShort(t)
	if k < 1 || s < 1 {
		t.Fatalf("cluster: need at least one member of one primary, got %d members of %d", k, s)
	}
	cfg := newConfig(opts)
	members := make([]*RedisCluster, k)
	for i := range members {
		rc, err := startRedisCluster(t, i, s, cfg)
		if err != nil {
			t.Fatal(err)
		}
		members[i] = rc
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, rc := range members {
		if err := rc.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return members
}

// clusterArgs are every node's cluster settings; WithConfig's come after
// them, so it can change them (cluster-node-timeout, say).
var clusterArgs = []string{
	"--cluster-enabled", "yes",
	"--cluster-config-file", "nodes.conf",
	"--cluster-node-timeout", "3000",
	"--cluster-require-full-coverage", "no",
	"--cluster-allow-reads-when-down", "no",
	// A replica's full synchronisation starts at once, not after 5 s,
	// and its primary pings it every second, not every 10 (CLUSTER SLOTS
	// lists a replica only once it has replicated something).
	"--repl-diskless-sync-delay", "0",
	"--repl-ping-replica-period", "1",
}

func startRedisCluster(t testing.TB, index, s int, cfg config) (*RedisCluster, error) {
	t.Helper()
	rc := &RedisCluster{index: index}
	if cfg.replicas < 0 {
		return nil, fmt.Errorf("cluster: member %d: %d replicas per primary", index, cfg.replicas)
	}
	total := s * (1 + cfg.replicas)
	var nodes []node
	var peers []func() (string, int, int, error)
	switch cfg.backend {
	case Process:
		for i := 0; i < total; i++ {
			bus, err := redistest.FreePort(t)
			if err != nil {
				return nil, fmt.Errorf("cluster: no free port: %w", err)
			}
			args := append(append(append([]string(nil), clusterArgs...), cfg.redisArgs()...), "--cluster-port", strconv.Itoa(bus))
			pn := processNode{s: redistest.StartOne(t, redistest.WithArgs(args...))}
			nodes = append(nodes, pn)
			peers = append(peers, func() (string, int, int, error) {
				_, p, _ := strings.Cut(pn.addr(), ":")
				port, _ := strconv.Atoi(p)
				return "127.0.0.1", port, bus, nil
			})
		}
	case Docker:
		dcfg := cfg
		dcfg.extra = append(append([]string(nil), clusterArgs...), cfg.extra...)
		dcfg.samePort = true
		dcfg.portArgs = func(hostPort int) []string {
			return []string{
				"--cluster-port", "16379",
				"--cluster-announce-port", strconv.Itoa(hostPort),
				"--cluster-announce-bus-port", "16379",
				"--cluster-announce-hostname", "127.0.0.1",
				"--cluster-preferred-endpoint-type", "hostname",
			}
		}
		ns, err := startDocker(t, total, &dcfg)
		if err != nil {
			return nil, err
		}
		for _, nd := range ns {
			d := nd.(*dockerNode)
			nodes = append(nodes, d)
			peers = append(peers, func() (string, int, int, error) {
				ip, err := d.ipIn()
				return ip, d.inner, 16379, err
			})
		}
	default:
		return nil, fmt.Errorf("cluster: unknown backend %q (want %q or %q)", cfg.backend, Docker, Process)
	}
	for i, nd := range nodes {
		m := &Master{index: i, node: nd}
		p, err := newMasterPool(m.Addr())
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { p.Close() })
		m.pool = p
		id, err := redis.String(m.Do("CLUSTER", "MYID"))
		if err != nil {
			return nil, fmt.Errorf("cluster: member %d node %s: CLUSTER MYID: %w", index, m.Addr(), err)
		}
		rc.Nodes = append(rc.Nodes, &Node{Master: m, id: id, peer: peers[i]})
	}
	for i, n := range rc.Nodes[:s] {
		lo, hi := i*Slots/s, (i+1)*Slots/s-1
		if _, err := n.Do("CLUSTER", "SET-CONFIG-EPOCH", i+1); err != nil {
			return nil, rc.wrap(n, "CLUSTER SET-CONFIG-EPOCH", err)
		}
		if _, err := n.Do("CLUSTER", "ADDSLOTSRANGE", lo, hi); err != nil {
			return nil, rc.wrap(n, "CLUSTER ADDSLOTSRANGE", err)
		}
	}
	for _, n := range rc.Nodes[1:] {
		host, port, bus, err := n.peer()
		if err != nil {
			return nil, rc.wrap(n, "its address on the cluster's network", err)
		}
		if _, err := rc.Nodes[0].Do("CLUSTER", "MEET", host, port, bus); err != nil {
			return nil, rc.wrap(rc.Nodes[0], "CLUSTER MEET", err)
		}
	}
	if err := rc.replicate(s, cfg.replicas); err != nil {
		return nil, err
	}
	return rc, nil
}

func (rc *RedisCluster) wrap(n *Node, what string, err error) error {
	return fmt.Errorf("cluster: member %d node %s: %s: %w", rc.index, n.Addr(), what, err)
}

// Seeds returns the addresses of the cluster's nodes, 127.0.0.1:port, to
// give a cluster client as its seeds.
func (rc *RedisCluster) Seeds() []string {
	addrs := make([]string, len(rc.Nodes))
	for i, n := range rc.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// String names the member and its nodes' states.
func (rc *RedisCluster) String() string {
	parts := make([]string, len(rc.Nodes))
	for i, n := range rc.Nodes {
		parts[i] = n.String()
	}
	return fmt.Sprintf("member %d (cluster: %s)", rc.index, strings.Join(parts, "; "))
}

// WaitReady waits until every node that is up answers cluster_state:ok,
// knows every node of the cluster and every slot's owner, agrees with the
// others on its own role and slots (a primary back from a pause or a
// crash through which it was failed over has learnt that it is now a
// replica), and, if a replica of a primary that is up, has its
// replication link up — or ctx ends.
func (rc *RedisCluster) WaitReady(ctx context.Context) error {
	var last error
	for {
		last = rc.ready()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: member %d not ready: %w (%w)", rc.index, last, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (rc *RedisCluster) ready() error {
	views := make(map[*Node]map[string]nodeLine)
	for _, n := range rc.Nodes {
		if paused, down, _ := n.State(); paused || down {
			continue
		}
		v, err := rc.view(n)
		if err != nil {
			return err
		}
		views[n] = v
	}
	for _, n := range rc.Nodes {
		if paused, down, _ := n.State(); paused || down {
			continue
		}
		info, err := redis.String(n.Do("CLUSTER", "INFO"))
		if err != nil {
			return rc.wrap(n, "CLUSTER INFO", err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return rc.wrap(n, "CLUSTER INFO", errors.New("cluster_state is not ok"))
		}
		if !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(rc.Nodes))+"\r") {
			return rc.wrap(n, "CLUSTER INFO", errors.New("does not know every node yet"))
		}
		if !strings.Contains(info, "cluster_slots_assigned:"+strconv.Itoa(Slots)+"\r") {
			return rc.wrap(n, "CLUSTER INFO", errors.New("does not know every slot's owner yet"))
		}
		if err := rc.replicaReady(n, views); err != nil {
			return err
		}
	}
	return nil
}

// Slot returns key's hash slot.
func Slot(key string) int { return keys.Slot(key) }

// Owner returns the node that owns slot, as the cluster's nodes agree on
// it: every node that is up names the same owner in CLUSTER SLOTS.
func (rc *RedisCluster) Owner(slot int) (*Node, error) {
	var owner *Node
	for _, n := range rc.Nodes {
		if paused, down, _ := n.State(); paused || down {
			continue
		}
		o, err := rc.ownerSeenBy(n, slot)
		if err != nil {
			return nil, err
		}
		if owner != nil && o != owner {
			return nil, fmt.Errorf("cluster: member %d: nodes disagree on slot %d's owner (%s, %s)", rc.index, slot, owner.Addr(), o.Addr())
		}
		owner = o
	}
	if owner == nil {
		return nil, fmt.Errorf("cluster: member %d: no node is up to say who owns slot %d", rc.index, slot)
	}
	return owner, nil
}

// ownerSeenBy returns slot's owner in n's CLUSTER SLOTS.
func (rc *RedisCluster) ownerSeenBy(n *Node, slot int) (*Node, error) {
	ranges, err := redis.Values(n.Do("CLUSTER", "SLOTS"))
	if err != nil {
		return nil, rc.wrap(n, "CLUSTER SLOTS", err)
	}
	for _, r := range ranges {
		f, err := redis.Values(r, nil)
		if err != nil || len(f) < 3 {
			return nil, rc.wrap(n, "CLUSTER SLOTS", fmt.Errorf("unexpected entry %v", r))
		}
		lo, _ := redis.Int(f[0], nil)
		hi, _ := redis.Int(f[1], nil)
		if slot < lo || slot > hi {
			continue
		}
		primary, err := redis.Values(f[2], nil)
		if err != nil || len(primary) < 3 {
			return nil, rc.wrap(n, "CLUSTER SLOTS", fmt.Errorf("unexpected primary %v", f[2]))
		}
		id, _ := redis.String(primary[2], nil)
		for _, o := range rc.Nodes {
			if o.id == id {
				return o, nil
			}
		}
		return nil, rc.wrap(n, "CLUSTER SLOTS", fmt.Errorf("slot %d owned by unknown node %q", slot, id))
	}
	return nil, rc.wrap(n, "CLUSTER SLOTS", fmt.Errorf("slot %d has no owner", slot))
}

// MigrateSlot moves slot from its owner to dst, with its keys, while
// clients keep running: IMPORTING on dst, MIGRATING on the owner, then
// (after hold, to keep the ASK window open under load) the slot's keys
// moved with MIGRATE in batches, and the slot given to dst on every
// primary (replicas learn it from theirs). dst must be a primary.
// It returns once every node that is up names dst as the owner. Moving a
// slot to its owner does nothing.
func (rc *RedisCluster) MigrateSlot(ctx context.Context, slot int, dst *Node, hold time.Duration) error {
	src, err := rc.Owner(slot)
	if err != nil {
		return err
	}
	if src == dst {
		return nil
	}
	if _, err := dst.Do("CLUSTER", "SETSLOT", slot, "IMPORTING", src.id); err != nil {
		return rc.wrap(dst, "CLUSTER SETSLOT IMPORTING", err)
	}
	if _, err := src.Do("CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id); err != nil {
		return rc.wrap(src, "CLUSTER SETSLOT MIGRATING", err)
	}
	if hold > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(hold):
		}
	}
	for {
		ks, err := redis.Values(src.Do("CLUSTER", "GETKEYSINSLOT", slot, 100))
		if err != nil {
			return rc.wrap(src, "CLUSTER GETKEYSINSLOT", err)
		}
		if len(ks) == 0 {
			break
		}
		host, port, _, err := dst.peer()
		if err != nil {
			return rc.wrap(dst, "its address on the cluster's network", err)
		}
		args := []any{host, port, "", 0, 5000, "KEYS"}
		args = append(args, ks...)
		if _, err := src.Do("MIGRATE", args...); err != nil && !strings.HasPrefix(err.Error(), "NOKEY") {
			return rc.wrap(src, "MIGRATE", err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cluster: member %d: migrating slot %d: %w", rc.index, slot, err)
		}
	}
	// The new owner first, then the old one (which from then on answers
	// MOVED), then the rest: the order redis-cli uses.
	order := []*Node{dst, src}
	for _, n := range rc.Nodes {
		if n != dst && n != src {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if paused, down, _ := n.State(); paused || down {
			continue // it learns the new owner by gossip
		}
		if me, err := rc.self(n); err != nil {
			return err
		} else if me.replica() {
			continue // replicas refuse SETSLOT; they learn from their primary
		}
		if _, err := n.Do("CLUSTER", "SETSLOT", slot, "NODE", dst.id); err != nil {
			return rc.wrap(n, "CLUSTER SETSLOT NODE", err)
		}
	}
	for {
		o, err := rc.Owner(slot)
		if err == nil && o == dst {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: member %d: slot %d not yet owned by %s everywhere: %w", rc.index, slot, dst.Addr(), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// MigrateOnward moves slot, in every one of members at once, from its
// owner to the node after it in Nodes (the first after the last), with
// MigrateSlot and its hold, and returns once every move is done; the error
// is the moves' failures joined. The next node must be a primary: the
// members have no replicas.
func MigrateOnward(ctx context.Context, members []*RedisCluster, slot int, hold time.Duration) error {
	var wg sync.WaitGroup
	errs := make([]error, len(members))
	for m, rc := range members {
		owner, err := rc.Owner(slot)
		if err != nil {
			errs[m] = err
			continue
		}
		next := rc.Nodes[(slices.Index(rc.Nodes, owner)+1)%len(rc.Nodes)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[m] = rc.MigrateSlot(ctx, slot, next, hold)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// newMasterPool is the pool Start gives each master.
func newMasterPool(addr string) (*pool.RedisPool, error) {
	return pool.New(addr, pool.WithConnectTimeout(time.Second),
		pool.WithReadTimeout(2*time.Second), pool.WithWriteTimeout(2*time.Second))
}
