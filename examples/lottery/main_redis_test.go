package main

import (
	"context"
	"io"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLottery_withLocksNothingIsSpentTwice(t *testing.T) {
	for _, n := range []int{1, 3} {
		servers := redistest.Start(t, n+1)
		var masters []string
		for _, s := range servers[:n] {
			masters = append(masters, s.Addr())
		}
		cfg := config{instances: 4, users: 5, points: 100, price: 10, rounds: 3, round: 200 * time.Millisecond}
		res, err := run(context.Background(), cfg, masters, servers[n].Addr(), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if !res.consistent() {
			t.Fatalf("N=%d: inconsistent: %+v", n, res)
		}
		if res.tickets == 0 {
			t.Fatalf("N=%d: no ticket sold", n)
		}
	}
}

// Without locks the same run loses points or draws a round twice: the
// demonstration that the locks matter. (Races are not certain: a few
// tries.)
func TestLottery_withoutLocksItBreaks(t *testing.T) {
	servers := redistest.Start(t, 2)
	cfg := config{instances: 4, users: 3, points: 1000, price: 10, rounds: 2, round: 200 * time.Millisecond, nolock: true}
	for try := 0; try < 5; try++ {
		res, err := run(context.Background(), cfg, []string{servers[0].Addr()}, servers[1].Addr(), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if !res.consistent() {
			return
		}
	}
	t.Fatal("five runs without locks stayed consistent: the example does not show the race")
}
