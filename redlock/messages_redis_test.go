package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// The per-master messages say what happened, with one "redlock: " prefix
// in all: a master that did not answer "did not answer in time (50ms)";
// a master the pipelined connection already knew to be down, whose
// command was failed at once without being sent, "known down since …,
// not tried" — not a timeout it never waited for. One master SIGSTOPped
// (hung), two killed, of five.
func TestMessages_hungAndKilledMasters(t *testing.T) {
	servers := redistest.Start(t, 5)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	if err := servers[0].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[0].Resume()
	for _, s := range servers[1:3] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	nodeErrs := func(t *testing.T, err error) map[int]*redlock.NodeError {
		t.Helper()
		var qe *redlock.QuorumError
		if !errors.As(err, &qe) || qe.Failed == nil {
			t.Fatalf("not a *QuorumError with failed masters: %v", err)
		}
		out := map[int]*redlock.NodeError{}
		for _, e := range qe.Failed.Errors {
			var ne *redlock.NodeError
			if errors.As(e, &ne) {
				out[ne.Index] = ne
			}
		}
		return out
	}
	forEachPath(t, func(t *testing.T, path connPath) {
		c, err := redlock.NewFromAddrs(addrs, path.Option(), redlock.WithTimeout(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		_, err = c.TryAcquire(ctx, "msg-k")
		if n := strings.Count(err.Error(), "redlock: "); n != 1 {
			t.Errorf("%d prefixes: %v", n, err)
		}
		// The first call waits for the hung master: its command timed out
		// (pooled) or never left the dial that timed out (pipelined). (A
		// round decided before that, under load, does not name it.)
		if ne := nodeErrs(t, err)[0]; ne != nil {
			msg := ne.Error()
			if !errors.Is(ne, redlock.ErrMasterTimeout) ||
				!strings.HasPrefix(msg, "master 0 ("+addrs[0]+"): did not answer in time (50ms)") &&
					!strings.Contains(msg, "not tried: its dial failed: ") {
				t.Errorf("the hung master, first call: %v", ne)
			}
		}
		for i := 0; i < 3; i++ {
			start := time.Now()
			_, err = c.TryAcquire(ctx, "msg-k")
			took := time.Since(start)
			if n := strings.Count(err.Error(), "redlock: "); n != 1 {
				t.Errorf("%d prefixes: %v", n, err)
			}
			for idx, ne := range nodeErrs(t, err) {
				msg := ne.Error()
				if strings.Contains(msg, "did not answer in time") && took < 50*time.Millisecond {
					t.Errorf("call %d took %v, yet master %d 'did not answer in time (50ms)': %s", i, took, idx, msg)
				}
				if strings.Contains(msg, "not tried") && !strings.Contains(msg, "known down since ") {
					t.Errorf("master %d: %s", idx, msg)
				}
				if idx == 0 && !errors.Is(ne, redlock.ErrMasterTimeout) {
					t.Errorf("the hung master's error does not match ErrMasterTimeout: %s", msg)
				}
				if errors.Is(ne, context.DeadlineExceeded) {
					t.Errorf("master %d's error matches context.DeadlineExceeded, which only the caller's ctx may: %s", idx, msg)
				}
			}
			t.Logf("call %d (%v): %v", i, took, err)
		}
	})
}
