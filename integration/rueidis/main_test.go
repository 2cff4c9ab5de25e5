// Package rueidis_test runs the integration suites (the conformance suite
// and the Redis Cluster members' cases) through the rueidis and valkey-go
// adapters, rueidis.New and valkey.New, each test once per adapter. They
// live in the integration module so that the adapters' own modules
// require nothing their shipped code does not import.
package rueidis_test

import (
	"context"
	"testing"

	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/redlock"
	qlrueidis "github.com/quorumlock/quorumlock/rueidis"
	qlvalkey "github.com/quorumlock/quorumlock/valkey"
)

// TestMain checks that no goroutine outlives the tests but one of the
// client libraries' own: a cluster client that found a node gone closes
// its connection 5 s later, from a goroutine that sleeps until then, also
// after the client was closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"))
}

// adapter makes a redlock.Client through one of the adapters: one client
// per member, each given its addresses (a master's, or a cluster's
// seeds), closed by t.Cleanup; exists counts a key on member i.
type adapter struct {
	name string
	new  func(t *testing.T, members [][]string, opts ...redlock.Option) (c *redlock.Client, exists func(i int, key string) (int64, error))
}

var adapters = []adapter{
	{"rueidis", func(t *testing.T, members [][]string, opts ...redlock.Option) (*redlock.Client, func(int, string) (int64, error)) {
		clients := make([]rueidis.Client, len(members))
		for i, m := range members {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: m, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			clients[i] = c
		}
		return lockClient(t)(qlrueidis.New(clients, opts...)), func(i int, key string) (int64, error) {
			c := clients[i]
			return c.Do(context.Background(), c.B().Exists().Key(key).Build()).AsInt64()
		}
	}},
	{"valkey-go", func(t *testing.T, members [][]string, opts ...redlock.Option) (*redlock.Client, func(int, string) (int64, error)) {
		clients := make([]valkey.Client, len(members))
		for i, m := range members {
			c, err := valkey.NewClient(valkey.ClientOption{InitAddress: m, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			clients[i] = c
		}
		return lockClient(t)(qlvalkey.New(clients, opts...)), func(i int, key string) (int64, error) {
			c := clients[i]
			return c.Do(context.Background(), c.B().Exists().Key(key).Build()).AsInt64()
		}
	}},
}

// lockClient returns a function that fails t on New's error and closes
// the client by t.Cleanup.
func lockClient(t *testing.T) func(*redlock.Client, error) *redlock.Client {
	return func(c *redlock.Client, err error) *redlock.Client {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
}
