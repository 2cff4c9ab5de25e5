package integration_test

// Suite 1: conformance. Every public operation of redlock, and the seeds'
// cases, on N = 1, 3, 5 and 7 real masters, for both redigo paths. The
// cases live in package conformance, which module goredis runs too.

import (
	"fmt"
	"slices"
	"testing"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/integration/conformance"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func TestConformance(t *testing.T) {
	cluster.ForEachBackend(t, func(t *testing.T, b cluster.Backend) {
		for _, n := range []int{1, 3, 5, 7} {
			t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
				c := cluster.Start(t, n, cluster.WithBackend(b))
				forEachPath(t, func(t *testing.T, path connPath) {
					conformance.Cases(t, c, redigoClients(c, path))
				})
			})
		}
	})
}

// redigoClients makes the conformance suite's clients of c's masters on a
// redigo path, on the cluster's own pools (as the other suites' clients).
func redigoClients(c *cluster.Cluster, path connPath) conformance.NewClient {
	return func(t *testing.T, addrs []string, opts ...redlock.Option) *redlock.Client {
		t.Helper()
		if !slices.Equal(addrs, c.Addrs()) {
			t.Fatalf("conformance asked for masters %q of a cluster of %q", addrs, c.Addrs())
		}
		client, err := redigo.New(c.Pools(), append(opts, redigo.WithPipelining(path.pipelined))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		return client
	}
}
