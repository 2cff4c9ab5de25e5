package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/masters"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// TestMain is also an instance of the service when the scenario runs the
// test binary as one.
func TestMain(m *testing.M) {
	if name := os.Getenv(instanceEnv); name != "" {
		os.Exit(instance(name, masters.FromEnv()))
	}
	goleak.VerifyTestMain(m)
}

// Three real processes on real masters: the frozen leader is replaced with
// a higher term and its late write is refused (or, frozen with a write on
// its way, it finds its leadership lost before writing again); the killed
// one is replaced.
func TestScenario_frozenAndKilledLeadersAreReplaced(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 5} {
		servers := redistest.Start(t, n)
		addrs := make([]string, n)
		for i, s := range servers {
			addrs[i] = s.Addr()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		var out bytes.Buffer
		err := scenario(ctx, &out, exe, addrs)
		cancel()
		if err != nil {
			t.Fatalf("N=%d: %v\n%s", n, err, out.String())
		}
		if !strings.Contains(out.String(), "refused") && !strings.Contains(out.String(), "found its leadership lost") {
			t.Fatalf("N=%d: transcript lacks the refusal:\n%s", n, out.String())
		}
		t.Logf("N=%d:\n%s", n, out.String())
	}
}
