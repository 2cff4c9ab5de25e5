package rueidis_test

import (
	"testing"

	"github.com/quorumlock/quorumlock/integration/conformance"
	"github.com/quorumlock/quorumlock/redlock"
)

// The integration conformance suite (every public operation on N = 1, 3,
// 5 and 7 real masters; package integration/conformance) through each
// adapter's New: one client per master.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the conformance suite needs real Redis masters")
	}
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			conformance.Run(t, func(t *testing.T, addrs []string, opts ...redlock.Option) *redlock.Client {
				t.Helper()
				members := make([][]string, len(addrs))
				for i, addr := range addrs {
					members[i] = []string{addr}
				}
				c, _ := a.new(t, members, opts...)
				return c
			})
		})
	}
}
