package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// The per-master messages say what happened, with one "redlock: " prefix
// in all: a master that did not answer "did not answer in time (50ms)";
// a master already known to be down (a pipelined connection's, or on the
// pooled path one that left commands unanswered for the timeout), whose
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
		c, err := redigo.NewFromAddrs(addrs, path.Option(), redlock.WithTimeout(50*time.Millisecond))
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
		// (pooled; at the round's wait, which a first round's late answers
		// may have raised past the timeout) or never left the dial that timed out (pipelined), or
		// the first contact's identity probe, which goes through the
		// transport before the round, met that dial's timeout
		// first and the round's command was not tried; or (pooled) that
		// probe went unanswered for the timeout, so the master was known
		// down and the round's command not tried. (A round decided
		// before that, under load, does not name it.)
		if ne := nodeErrs(t, err)[0]; ne != nil {
			msg := ne.Error()
			pooledDown := !path.pipelined && strings.HasPrefix(msg, "master 0 ("+addrs[0]+"): known down since ") &&
				strings.Contains(msg, "not tried: no reply from the master for over 50ms")
			if !errors.Is(ne, redlock.ErrMasterTimeout) ||
				!strings.HasPrefix(msg, "master 0 ("+addrs[0]+"): did not answer in time (") &&
					!strings.Contains(msg, "not tried: its dial failed: ") &&
					!strings.Contains(msg, "not tried: its last dial failed: ") && !pooledDown {
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

// A round settled before every master answered — two of three refused, so
// no quorum could come — says which masters it did not wait for, instead
// of leaving them out of "0 of 3 masters agreed". The third master is
// SIGSTOPped, so its answer cannot come in first: the other two, holding
// the key for another client, refuse.
func TestMessages_notAwaitedWhenTheQuorumIsOutOfReach(t *testing.T) {
	servers := redistest.Start(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	forEachPath(t, func(t *testing.T, path connPath) {
		ctx := context.Background()
		key := "not-awaited-" + path.name
		holder, err := redigo.NewFromAddrs(addrs, path.Option())
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		c, err := redigo.NewFromAddrs(addrs, path.Option(), redlock.WithTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		warm, err := c.TryAcquire(ctx, key+"-warm-up") // the first call's run_id check, every master up
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l, err := holder.TryAcquire(ctx, key, redlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		// The holder returned at a quorum; wait until its grant is on
		// every master, so that both of the others refuse.
		for _, s := range servers {
			redistest.Eventually(t, 5*time.Second, "the holder's key reaches "+s.Addr(), func() bool {
				n, err := s.Do("EXISTS", key)
				return err == nil && n == int64(1)
			})
		}
		if err := servers[2].Pause(); err != nil {
			t.Fatal(err)
		}
		defer servers[2].Resume()
		_, err = c.TryAcquire(ctx, key)
		var qe *redlock.QuorumError
		if !errors.As(err, &qe) {
			t.Fatalf("not a *QuorumError: %v", err)
		}
		if len(qe.Refused) != 2 || len(qe.Unanswered) != 1 || qe.Unanswered[0] != 2 || qe.Failed != nil {
			t.Errorf("refused %v, unanswered %v, failed %v; want 2 refused, master 2 unanswered, none failed", qe.Refused, qe.Unanswered, qe.Failed)
		}
		t.Log(err)
		want := "; not awaited: master 2 (" + addrs[2] + ") (a quorum was out of reach without its answer)"
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
		if err := servers[2].Resume(); err != nil {
			t.Fatal(err)
		}
	})
}
