package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// settleBound bounds the wait for a failed attempt's rollbacks and their
// retries to reach a master: a retry may wait for a redial that failed
// (the redial delay, 1 s, each time) and for the retry backoff.
const settleBound = 15 * time.Second

// confirmSpell is how long a test that checks a rollback was not
// confirmed watches for one, once no retry is left: a confirmation goes
// 20 ms (the finisher's shortest backoff) after the rollback it confirms
// was answered.
const confirmSpell = 500 * time.Millisecond

// TestConfirm_onlyAfterAnUnansweredSET: the confirming rollback
// costs a command, and is due only where the SET it undoes failed
// unanswered and the rollback found nothing. It is not sent when the
// master refused the SET (no rollback at all), when it granted it and the
// round failed elsewhere (the rollback deletes it), when the SET ran but
// its reply was lost (its re-send is refused, the rollback deletes the
// grant), nor when the SET was granted, answered, and the first rollback
// ran but its reply was lost, so that the one sent again finds nothing
// (the SET ran, it cannot run again). Master 0 is behind a proxy that
// records every rollback of the key and whether the key held the
// attempt's token just before it ran.
func TestConfirm_onlyAfterAnUnansweredSET(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		for _, tc := range []struct {
			name    string
			masters int
			others  []int // masters where another holder has the key
			lostSET bool  // master 0 runs the first SET, its reply is lost
			lostRB  bool  // master 0 runs the first rollback, its reply is lost
			heldRB  bool  // master 0 runs the first rollback, and holds its reply past every bound
			want    string
		}{
			{name: "refused", masters: 1, others: []int{0}, want: ""},
			{name: "grantedRoundFailed", masters: 3, others: []int{1, 2}, want: "found"},
			{name: "setRanReplyLost", masters: 1, lostSET: true, want: "found"},
			{name: "rollbackReplyLost", masters: 3, others: []int{1, 2}, lostRB: true, want: "found(lost) none"},
			{name: "rollbackTimedOut", masters: 3, others: []int{1, 2}, lostRB: true, heldRB: true, want: "found(lost) none"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ss := redistest.Start(t, tc.masters)
				// The scripts in master 0's cache: the proxy runs the
				// client's EVALSHA there itself, and the warm-up's
				// release, which loads them on the pooled path (NOSCRIPT,
				// then EVAL), returns at a quorum, maybe before it ran
				// there.
				for _, sc := range scripts.All {
					if _, err := ss[0].Do("SCRIPT", "LOAD", sc.Source()); err != nil {
						t.Fatal(err)
					}
				}
				key := "cf:count:" + path.name + ":" + tc.name
				for _, i := range tc.others {
					if _, err := ss[i].Do("SET", key, "another", "PX", 60000); err != nil {
						t.Fatal(err)
					}
				}
				var mu sync.Mutex
				var rbs []string
				sets := 0
				hook := func(c *hostile.Conn, cmd []string) hostile.Verdict {
					switch {
					case cmd[0] == "SET" && len(cmd) > 2 && cmd[1] == key:
						mu.Lock()
						sets++
						first := sets == 1
						mu.Unlock()
						if first && tc.lostSET {
							if _, err := ss[0].Run(cmd); err != nil {
								t.Errorf("the SET run for the proxy: %v", err)
							}
							return hostile.HangUp
						}
					case cmd[0] == "EVALSHA" && len(cmd) > 5 && cmd[3] == key && cmd[5] == "":
						tok, _ := redis.String(ss[0].Do("GET", key))
						what := "none"
						if tok == cmd[4] {
							what = "found"
						}
						mu.Lock()
						rbs = append(rbs, what)
						first := len(rbs) == 1
						mu.Unlock()
						if first && tc.lostRB {
							mu.Lock()
							rbs[0] = "found(lost)"
							mu.Unlock()
							if _, err := ss[0].Run(cmd); err != nil {
								t.Errorf("the rollback run for the proxy: %v", err)
							}
							if tc.heldRB {
								return holdReply(c, heldFor)
							}
							return hostile.HangUp
						}
					}
					return hostile.Forward
				}
				p := hostile.NewProxy(t, ss[0].Addr(), hook)
				addrs := []string{p.Addr()}
				for _, s := range ss[1:] {
					addrs = append(addrs, s.Addr())
				}
				c, err := redigo.NewFromAddrs(addrs, redlock.WithTimeout(confirmTimeout), path.Option())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				warmUp(t, c, key+":warm")
				tried := time.Now()
				if _, err := c.TryAcquire(context.Background(), key, redlock.WithTTL(time.Minute)); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("TryAcquire: %v, want ErrNotAcquired", err)
				}
				// Wait until the rollbacks the case expects have reached
				// master 0 and no retry is left to send. A retry that
				// finds nothing is queued again, as a confirmation,
				// before it counts as done (redlock.Finishing), so no
				// confirmation of a retry comes after that. A rollback
				// whose reply was held fails at the stall bound or when
				// the proxy hangs up; its retry waits for a redial, which
				// on a loaded machine can miss the 100 ms per-master
				// timeout and then waits out the redial delay (1 s) and
				// the retry backoff: seconds.
				rollbacks := func() int {
					mu.Lock()
					defer mu.Unlock()
					return len(rbs)
				}
				n := len(strings.Fields(tc.want))
				redistest.Within(settleBound, func() bool { return rollbacks() >= n && redlock.Finishing(c) == 0 })
				// Past that, a rollback more would be a confirmation that
				// this case must not send: of a retry (already counted
				// above), or of the attempt's own rollback, 20 ms after
				// its answer, which may still be on its way.
				redistest.Within(confirmSpell, func() bool { return rollbacks() > n }) // the subject: time for an unwanted confirmation to show
				mu.Lock()
				got := fmt.Sprint(rbs)
				mu.Unlock()
				if want := "[" + tc.want + "]"; got != want {
					t.Errorf("rollbacks on master 0 (whether the key held the attempt's token as each ran), %v after the attempt: %s, want %s",
						time.Since(tried).Round(time.Millisecond), got, want)
				}
				if tok, err := redis.String(ss[0].Do("GET", key)); !errors.Is(err, redis.ErrNil) && tok != "another" {
					t.Errorf("master 0 keeps the failed attempt's grant (%q, %v)", tok, err)
				}
			})
		}
	})
}
