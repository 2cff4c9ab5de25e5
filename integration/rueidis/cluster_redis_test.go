package rueidis_test

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/integration/conformance"
	"github.com/quorumlock/quorumlock/redlock"
)

// clusterSeeds starts k quorum members, each a Redis Cluster of s
// primaries (redis-server processes), and returns them and their seeds
// (a client given them runs in cluster mode).
func clusterSeeds(t *testing.T, k, s int) ([]*cluster.RedisCluster, [][]string) {
	t.Helper()
	members := cluster.StartRedisClusters(t, k, s, cluster.WithBackend(cluster.Process))
	seeds := make([][]string, k)
	for i, m := range members {
		seeds[i] = m.Seeds()
	}
	return members, seeds
}

// Every lock kind on members that are Redis Clusters
// (conformance.ClusterKinds); a multi-key lock refused across slots
// leaves nothing on any member. And a waiter is woken by the holder's
// release notice (conformance.ClusterReleaseNotice).
func TestNew_clusterMembers(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			members, seeds := clusterSeeds(t, 3, 3)
			c, exists := a.new(t, seeds, redlockTimeout)
			t.Run("every lock kind", func(t *testing.T) {
				conformance.ClusterKinds(t, c, members, 3)
				for i := range members {
					for _, k := range conformance.SlotKeys("cross", 2) {
						if n, err := exists(i, k); err != nil || n != 0 {
							t.Errorf("member %d: %s left behind (%d, %v)", i, k, n, err)
						}
					}
				}
			})
			t.Run("release notice wakes a waiter", func(t *testing.T) {
				conformance.ClusterReleaseNotice(t, c, members, 3)
			})
		})
	}
}

var redlockTimeout = redlock.WithTimeout(500 * time.Millisecond)
