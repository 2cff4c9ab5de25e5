package goredis

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/testhook"
	"github.com/quorumlock/quorumlock/redlock"
)

// withClock replaces a Client's clock with c: redlock's test hook, which
// users do not see.
func withClock(c clock.Clock) redlock.Option {
	return testhook.WithClock.(func(clock.Clock) redlock.Option)(c)
}

// TestMain starts the redis-server the package's examples lock on (at
// $REDIS_ADDR), runs the tests, and checks that no goroutine outlives
// them.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "goredis-example")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s, err := launchServer(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("REDIS_ADDR", s.addr)
	code := m.Run()
	s.kill()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
