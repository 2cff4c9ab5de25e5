package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestConfirm_floodAfterAStoppedMaster: many failed attempts while
// one master of three is SIGSTOPped (their SETs wait in its buffers,
// unanswered; another holder has every key on a second master, so each
// attempt fails). After SIGCONT, every rollback there finds its answer
// and each that found nothing is confirmed once: the keys are gone from
// the woken master within seconds (not their 30 s TTL), the finisher's
// queue drains, and the scripts the woken master runs stay bounded (a
// rollback and at most one confirmation per attempt, plus the retries of
// the rollbacks that timed out while it was stopped, which go one at a
// time).
func TestConfirm_floodAfterAStoppedMaster(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		const n, workers = 60, 6
		ss := redistest.Start(t, 3)
		prefix := "cf:flood:" + path.name + ":"
		for i := 0; i < n; i++ {
			if _, err := ss[1].Do("SET", fmt.Sprintf("%s%d", prefix, i), "another", "PX", 60000); err != nil {
				t.Fatal(err)
			}
		}
		var logs syncBuffer
		c, err := redigo.NewFromAddrs([]string{ss[0].Addr(), ss[1].Addr(), ss[2].Addr()},
			redlock.WithTimeout(confirmTimeout), path.Option(), redlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		warmUp(t, c, prefix+"warm")
		scripts0, sets0 := scriptCalls(ss[2]), ss[2].Calls("set")
		if err := ss[2].Pause(); err != nil {
			t.Fatal(err)
		}
		resumed := false
		defer func() {
			if !resumed {
				_ = ss[2].Resume()
			}
		}()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; i < n; i += workers {
					_, err := c.TryAcquire(context.Background(), fmt.Sprintf("%s%d", prefix, i), redlock.WithTTL(30*time.Second))
					if !errors.Is(err, redlock.ErrNotAcquired) {
						errs <- fmt.Errorf("attempt %d: %v, want ErrNotAcquired", i, err)
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		// Let the SETs' and rollbacks' bounds pass while it is stopped.
		maxPending := 0
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			maxPending = max(maxPending, redlock.Finishing(c))
		}
		if err := ss[2].Resume(); err != nil {
			t.Fatal(err)
		}
		resumed = true
		woke := time.Now()
		left := func() []string {
			keys, err := redis.Strings(ss[2].Do("KEYS", prefix+"*"))
			if err != nil {
				t.Fatal(err)
			}
			var ours []string
			for _, k := range keys {
				if !strings.HasSuffix(k, "warm") {
					ours = append(ours, k)
				}
			}
			return ours
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if !redistest.WaitFor(ctx, func() bool { return len(left()) == 0 && redlock.Finishing(c) == 0 }) {
			t.Fatalf("10 s after SIGCONT: %d keys left on the woken master %v, %d retries pending", len(left()), left(), redlock.Finishing(c))
		}
		freed := time.Since(woke)
		time.Sleep(300 * time.Millisecond) // the subject: a spell for any straggling confirmation to show
		scripts := scriptCalls(ss[2]) - scripts0
		t.Logf("%d failed attempts: at most %d retries pending while stopped; keys freed and queue drained %v after SIGCONT; %d SETs and %d scripts run on the woken master; %d log lines of too many outstanding retries",
			n, maxPending, freed.Round(time.Millisecond), ss[2].Calls("set")-sets0, scripts, strings.Count(logs.String(), "too many outstanding"))
		// Pooled, each attempt's first rollback waited in the stopped
		// master's buffers too, and so did the finisher's retries sent
		// one at a time while it was stopped (backoff 20 ms doubling to
		// 1 s: about 7 in 3 s); after SIGCONT each rollback is retried
		// and, finding nothing, confirmed.
		if bound := 3*n + 15; scripts > bound {
			t.Errorf("%d scripts ran on the woken master for %d failed attempts: more than a rollback, a retry and a confirmation each and the retries sent while it was stopped (%d)", scripts, n, bound)
		}
	})
}
