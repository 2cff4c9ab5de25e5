package valkey_test

import (
	"context"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/integration/conformance"
	"github.com/quorumlock/quorumlock/redlock"
	qlvalkey "github.com/quorumlock/quorumlock/valkey"
)

// clusterMembers starts k quorum members, each a Redis Cluster of s
// primaries (redis-server processes), and returns one valkey-go client per
// member (in cluster mode: its seeds answer CLUSTER SLOTS), closed by
// t.Cleanup.
func clusterMembers(t *testing.T, k, s int) ([]*cluster.RedisCluster, []valkey.Client) {
	t.Helper()
	members := cluster.StartRedisClusters(t, k, s, cluster.WithBackend(cluster.Process))
	clients := make([]valkey.Client, k)
	for i, m := range members {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: m.Seeds(), DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		clients[i] = c
	}
	return members, clients
}

// Every lock kind on members that are Redis Clusters
// (conformance.ClusterKinds); a multi-key lock refused across slots
// leaves nothing on any member.
func TestNew_clusterMembers_everyLockKind(t *testing.T) {
	members, clients := clusterMembers(t, 3, 3)
	c, err := qlvalkey.New(clients, redlock.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conformance.ClusterKinds(t, c, members, 3)
	ctx := context.Background()
	for i, cl := range clients {
		for _, k := range conformance.SlotKeys("cross", 2) {
			if n, err := cl.Do(ctx, cl.B().Exists().Key(k).Build()).AsInt64(); err != nil || n != 0 {
				t.Errorf("member %d: %s left behind (%d, %v)", i, k, n, err)
			}
		}
	}
}

// A waiter on cluster members is woken by the holder's release notice
// (conformance.ClusterReleaseNotice).
func TestNew_clusterMembers_releaseNoticeWakesWaiter(t *testing.T) {
	members, clients := clusterMembers(t, 3, 3)
	c, err := qlvalkey.New(clients, redlock.WithTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conformance.ClusterReleaseNotice(t, c, members, 3)
}
