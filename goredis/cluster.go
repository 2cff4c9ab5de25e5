package goredis

import (
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
)

// Quorum members that are Redis Clusters.
//
// A *redis.ClusterClient given to New (or NewTransport) is one quorum
// member: one independent Redis Cluster, whose slots may be spread over
// many primaries. go-redis routes each command of a batch by its keys'
// slot, pipelines per node, follows MOVED (reloading its slot map) and
// ASK (with ASKING) by itself, and finds the new topology after a
// failover or a resharding. Every lock kind works: each of the lock's
// scripts touches keys of one hash slot (companion keys — the fencing
// counter, the fair queue — carry the lock key's hash tag), so it runs on
// the one node that owns that slot.
//
// New turns on redlock.WithClusterSlots when any client is a
// *redis.ClusterClient: a multi-key lock whose keys are in different slots
// is then refused with an error matching redlock.ErrInvalid before
// anything is sent (one script cannot touch two slots, and splitting the
// lock per slot would lose its all-or-nothing promise on each member).
//
// Such a transport is not Ordered: a redirection may run a command after
// one sent later, so the redlock.Client chains a holder's commands itself.
// Scripts are loaded per node as they are needed (a NOSCRIPT from a node
// that has not seen a script yet is answered by EVAL there).
//
// Release notices: a script's PUBLISH on a cluster node reaches every
// node (the cluster bus broadcasts classic pub/sub), so the transport's
// subscription, on a connection to one node of the member, hears the
// releases of every slot. When that node fails the subscription ends and
// the redlock.Client subscribes again (go-redis picks a node that
// answers) and polls meanwhile.
//
// A member that is a cluster keeps a lock only as long as the primary
// owning its slot does: a failover to a replica that had not received the
// lock yet forgets it. See docs/safety.md, "Members that are Redis
// Clusters".

// withClusterSlots returns opts with redlock.WithClusterSlots added when a
// client is a *redis.ClusterClient.
func withClusterSlots(clients []redis.UniversalClient, opts []redlock.Option) []redlock.Option {
	for _, c := range clients {
		if _, ok := c.(*redis.ClusterClient); ok {
			return append(append([]redlock.Option{}, opts...), redlock.WithClusterSlots())
		}
	}
	return opts
}

// sharded reports whether client spreads commands over many nodes by key
// (a cluster or a ring). Its transport is not Ordered, so a command
// answered NOSCRIPT (it did not run) may be sent again as EVAL behind
// later ones: the redlock.Client does not rely on the order of a
// transport that is not Ordered.
func sharded(client redis.UniversalClient) bool {
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}
