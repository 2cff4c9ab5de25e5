package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

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
				if _, err := c.TryAcquire(context.Background(), key, redlock.WithTTL(time.Minute)); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("TryAcquire: %v, want ErrNotAcquired", err)
				}
				// Past any rollback, its retries (backoff from 20 ms) and
				// a confirmation 20 ms after the last.
				wait := 600 * time.Millisecond
				if tc.heldRB {
					wait += heldFor
				}
				time.Sleep(wait) // the subject: the proxy holds the reply this long
				mu.Lock()
				got := fmt.Sprint(rbs)
				mu.Unlock()
				if want := "[" + tc.want + "]"; got != want {
					t.Errorf("rollbacks on master 0 (whether the key held the attempt's token as each ran): %s, want %s", got, want)
				}
				if tok, err := redis.String(ss[0].Do("GET", key)); !errors.Is(err, redis.ErrNil) && tok != "another" {
					t.Errorf("master 0 keeps the failed attempt's grant (%q, %v)", tok, err)
				}
			})
		}
	})
}
