package goredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/goredis"
	"github.com/quorumlock/quorumlock/integration/conformance"
	"github.com/quorumlock/quorumlock/redlock"
)

// The integration conformance suite (every public operation on N = 1, 3,
// 5 and 7 real masters; package integration/conformance) through New: one
// go-redis client per master.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the conformance suite needs real Redis masters")
	}
	conformance.Run(t, func(t *testing.T, addrs []string, opts ...redlock.Option) *redlock.Client {
		t.Helper()
		clients := make([]redis.UniversalClient, len(addrs))
		for i, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			t.Cleanup(func() { c.Close() })
			clients[i] = c
		}
		c, err := goredis.New(clients, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	})
}
