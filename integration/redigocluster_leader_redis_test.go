package integration_test

// Election.Leader on members that are
// Redis Clusters through the redigo transport (cluster://).

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/integration/conformance"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// Leader's read of a cluster member goes to the owner of the election's
// key, and to no other node: with the node that owns the slot of the
// leader read's script text (what a router that takes EVAL's first
// argument for its key picks) paused in every member, an election on a
// key another node owns is still read. Campaign (routed by key) works.
func TestClusterMember_leaderReadRoutedByKey(t *testing.T) {
	members, specs := redigoClusterMembers(t, 3, 3)
	c := newRedigoClusterClient(t, specs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srcSlot := cluster.Slot(scripts.LeaderRead.Source())
	var key string
	for _, k := range conformance.SlotKeys("leader18b", 3) {
		if k1, s := cluster.Slot(k)*3/cluster.Slots, srcSlot*3/cluster.Slots; k1 != s {
			key = k
			break
		}
	}
	el, err := election.New(c, key)
	if err != nil {
		t.Fatal(err)
	}
	ld, err := el.Campaign(ctx, "cluster-leader")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(context.Background())
	got, err := el.Leader(ctx)
	if err != nil || got.Value != "cluster-leader" || got.Term != ld.Term() {
		t.Fatalf("Leader before the pause: %+v, %v (term %d)", got, err, ld.Term())
	}
	// A key without a hash tag: its metadata hash is in its slot too.
	plain, err := election.New(c, "svc:scheduler")
	if err != nil {
		t.Fatal(err)
	}
	pld, err := plain.Campaign(ctx, "plain-leader")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := plain.Leader(ctx); err != nil || got.Value != "plain-leader" || got.Term != pld.Term() {
		t.Fatalf("Leader of a key without a hash tag: %+v, %v (term %d)", got, err, pld.Term())
	}
	if err := pld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var paused []*cluster.Node
	defer func() {
		for _, n := range paused {
			_ = n.Resume()
		}
	}()
	for _, m := range members {
		n, err := m.Owner(srcSlot)
		if err != nil {
			t.Fatal(err)
		}
		if kn, err := m.Owner(cluster.Slot(key)); err != nil || kn == n {
			t.Fatalf("the key's owner is the script's slot owner (%v)", err)
		}
		if err := n.Pause(); err != nil {
			t.Fatal(err)
		}
		paused = append(paused, n)
	}
	got, err = el.Leader(ctx)
	if err != nil || got.Value != "cluster-leader" || got.Term != ld.Term() {
		t.Fatalf("Leader with a node that does not own %s paused in every member: %+v, %v", key, got, err)
	}
	// The key's own node paused in one member too: the other two members
	// are a quorum, and Leader names the leader within its ctx.
	kn, err := members[0].Owner(cluster.Slot(key))
	if err != nil {
		t.Fatal(err)
	}
	if err := kn.Pause(); err != nil {
		t.Fatal(err)
	}
	paused = append(paused, kn)
	got, err = el.Leader(ctx)
	if err != nil || got.Value != "cluster-leader" || got.Term != ld.Term() {
		t.Fatalf("Leader with the key's node paused in one member: %+v, %v", got, err)
	}
}
