package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every strategy with every mix keeps the market consistent, on real
// masters: money is conserved, every bought item is in one inventory.
func TestMarket_everyStrategyStaysConsistent(t *testing.T) {
	servers := redistest.Start(t, 4)
	masters := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
	var out bytes.Buffer
	ok, err := table(context.Background(), &out, masters, servers[3].Addr(), 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if !ok {
		t.Fatal("a run left the market inconsistent")
	}
	if lines := strings.Count(out.String(), "\n"); lines != 1+len(strategies)*len(mixes) {
		t.Fatalf("%d lines", lines)
	}
}
