// Package integration_test holds the suites that run quorumlock against
// real Redis masters and break them: see docs/testing.md.
package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// requirePartition skips a case that needs partitions on a backend that
// cannot make them, saying so.
func requirePartition(t *testing.T, b cluster.Backend) {
	t.Helper()
	if b == cluster.Process {
		t.Skip("the process backend cannot partition a master (redis-server processes share the loopback interface); the docker backend runs this case")
	}
}

// timeout is the per-master timeout of the suites' clients: generous, as
// the suites run under -race on two cores beside the Docker engine.
const timeout = 300 * time.Millisecond

// A connPath is one of the two ways a Client of redigo pools carries its
// commands to a master: pipelined (all goroutines share one connection
// per master) or pooled (each command borrows a pooled connection).
type connPath struct {
	name      string
	pipelined bool
}

var connPaths = []connPath{{"pipelined", true}, {"pooled", false}}

// forEachPath runs f as the subtests "pipelined" and "pooled", each given
// its path to hand every client it makes.
func forEachPath(t *testing.T, f func(t *testing.T, path connPath)) {
	t.Helper()
	for _, p := range connPaths {
		t.Run(p.name, func(t *testing.T) { f(t, p) })
	}
}

// newClient is a client of c's masters on path, with the suites'
// per-master timeout unless opts set another.
func newClient(t *testing.T, path connPath, c *cluster.Cluster, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	opts = append(append([]redlock.Option{redlock.WithTimeout(timeout)}, opts...), redigo.WithPipelining(path.pipelined))
	client, err := redigo.New(c.Pools(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func key(t *testing.T) string { return fmt.Sprintf("lock:%s", t.Name()) }
