package rueidis_test

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/quorumlock/quorumlock/integration/conformance"
	"github.com/quorumlock/quorumlock/redlock"
	qlrueidis "github.com/quorumlock/quorumlock/rueidis"
)

// The integration conformance suite (every public operation on N = 1, 3,
// 5 and 7 real masters; package integration/conformance) through New: one
// rueidis client per master.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the conformance suite needs real Redis masters")
	}
	conformance.Run(t, func(t *testing.T, addrs []string, opts ...redlock.Option) *redlock.Client {
		t.Helper()
		clients := make([]rueidis.Client, len(addrs))
		for i, a := range addrs {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			clients[i] = c
		}
		c, err := qlrueidis.New(clients, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	})
}
