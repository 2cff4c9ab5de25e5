// Package rueidis_test runs the integration suites (the conformance suite
// and the Redis Cluster members' cases) through the rueidis adapter,
// rueidis.New. They live in the integration module so that the adapter's
// own module requires nothing its shipped code does not import.
package rueidis_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests but one of the
// client library's own: a cluster client that found a node gone closes its
// connection 5 s later, from a goroutine that sleeps until then, also
// after the client was closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}
