package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// a27Interval is one holder's hold: from Acquire's return to the earlier
// of its validity's end and its release.
type a27Interval struct {
	client     int
	start, end time.Time
}

// Separate clients (some listing the masters in reverse order, some on
// the other path) contend for one key on five masters while masters —
// the key's lead half of the time — are SIGSTOPped at random moments for
// random spells, sometimes two at once. No two holds overlap (each from
// Acquire's return to the earlier of Lock.Until and the release call),
// and once everything stops every master is free of the key (released or
// rolled back; the TTL is long enough that an expiry would not hide a
// grant left behind). With a short TTL holders also sometimes vanish
// without releasing.
func TestLead_exclusionWithMastersStopped(t *testing.T) {
	redistest.SkipShort(t)
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"ttl30s", 30 * time.Second}, {"ttl250ms", 250 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			servers := redistest.Start(t, 5)
			const clients = 6
			cs := make([]*Client, clients)
			for i := range cs {
				ss := servers
				if i%3 == 1 {
					ss = slices.Clone(servers)
					slices.Reverse(ss)
				}
				cs[i] = leadClient(t, ss, i%2 == 0, WithTimeout(100*time.Millisecond))
			}
			key := "leadstop:safety:" + tc.name
			lead0 := cs[0].leadFor(key)
			// Every command the masters run on key, for a key left behind.
			monitors := make([]*redistest.Monitor, len(servers))
			for i, s := range servers {
				monitors[i] = s.Monitor(t)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var mu sync.Mutex
			var holds []a27Interval
			tokens := make(map[string]string) // a hold's token: whose, when
			var errs []error
			var wg sync.WaitGroup
			for i, c := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						l, err := c.Acquire(ctx, key, WithTTL(tc.ttl), WithWait(3*time.Second))
						if err != nil {
							if !errors.Is(err, ErrNotAcquired) {
								mu.Lock()
								errs = append(errs, err)
								mu.Unlock()
							}
							continue
						}
						got := time.Now()
						until := l.Until()
						vanish := tc.ttl < time.Second && rand.IntN(10) == 0
						if vanish {
							time.Sleep(tc.ttl + 20*time.Millisecond) // the subject: a holder that vanishes past its TTL
						} else {
							time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // the subject: a random hold
						}
						rel := time.Now()
						end := until
						if rel.Before(end) {
							end = rel
						}
						var rerr error
						if !vanish {
							rerr = l.Release(context.Background())
						}
						mu.Lock()
						holds = append(holds, a27Interval{i, got, end})
						tokens[l.Token()] = fmt.Sprintf("client %d's hold %v-%v (vanished %v, release: %v)", i, got.Format("15:04:05.000"), end.Format("15:04:05.000"), vanish, rerr)
						mu.Unlock()
					}
				}()
			}
			stopped := make([]bool, len(servers))
			resumeAll := func() {
				for i, s := range servers {
					if stopped[i] {
						_ = s.Resume()
						stopped[i] = false
					}
				}
			}
			defer resumeAll()
			pauses, leadPauses := 0, 0
			end := time.Now().Add(5 * time.Second)
			for time.Now().Before(end) {
				time.Sleep(time.Duration(50+rand.IntN(250)) * time.Millisecond) // the subject: a random spell between pauses
				m := rand.IntN(len(servers))
				if rand.IntN(2) == 0 {
					m = lead0
					leadPauses++
				}
				pick := []int{m}
				if rand.IntN(4) == 0 {
					pick = append(pick, (m+1+rand.IntN(len(servers)-1))%len(servers))
				}
				for _, i := range pick {
					_ = servers[i].Pause()
					stopped[i] = true
				}
				pauses++
				time.Sleep(time.Duration(20+rand.IntN(380)) * time.Millisecond) // the subject: a random pause
				resumeAll()
			}
			cancel()
			wg.Wait()
			for _, e := range errs {
				t.Errorf("Acquire: %v", e)
			}
			sort.Slice(holds, func(a, b int) bool { return holds[a].start.Before(holds[b].start) })
			per := make([]int, clients)
			var maxEnd time.Time
			var maxBy int
			overlaps := 0
			for j, h := range holds {
				per[h.client]++
				if j > 0 && h.start.Before(maxEnd) {
					overlaps++
					if overlaps <= 5 {
						t.Errorf("hold %d of client %d began %v before client %d's hold ended", j, h.client, maxEnd.Sub(h.start), maxBy)
					}
				}
				if h.end.After(maxEnd) {
					maxEnd, maxBy = h.end, h.client
				}
			}
			t.Logf("%d holds (%v by client), %d overlaps; %d pauses, %d of the lead (%d)", len(holds), per, overlaps, pauses, leadPauses, lead0)
			if len(holds) == 0 {
				t.Fatal("nobody got the lock")
			}
			if tc.ttl >= time.Second {
				// Everything released or rolled back (retries included).
				wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer wcancel()
				for i, s := range servers {
					if !redistest.WaitFor(wctx, func() bool { return !exists(t, s, key) }) {
						ttl, _ := s.Do("PTTL", key)
						v, _ := redis.String(s.Do("GET", key))
						whose, ok := tokens[v]
						if !ok {
							whose = "no hold's: a failed attempt's"
						}
						t.Errorf("master %d still holds the key (PTTL %v, token %q: %s)", i, ttl, v, whose)
						if v != "" {
							for j, m := range monitors {
								for _, line := range m.Lines(key, v) {
									t.Logf("master %d ran: %s", j, line)
								}
							}
						}
					}
				}
			}
		})
	}
}

// The caller's ctx ends while a led attempt waits for its stopped lead;
// the lead then grants late: its grant is rolled back, no other master
// is ever asked, and Close returns.
func TestLead_attemptCancelledWhileLeadStopped(t *testing.T) {
	redistest.SkipShort(t)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			servers := redistest.Start(t, 3)
			// A long per-master timeout: the lead's SET is still awaited
			// when it runs.
			c := leadClient(t, servers, p.pipelined, WithTimeout(3*time.Second))
			key := "leadstop:cancel:" + p.name
			lead := c.leadFor(key)
			before := allSetCalls(t, servers)
			paused(t, servers[lead])
			ctx, cancel := context.WithCancel(context.Background())
			done := ledAttemptGo(ctx, c, key, lead)
			// The SET's bytes reach the stopped lead's socket: nothing
			// shows that while the process is stopped.
			time.Sleep(100 * time.Millisecond)
			cancel()
			select {
			case err := <-done:
				var qe *QuorumError
				if !errors.Is(err, context.Canceled) || !errors.As(err, &qe) {
					t.Fatalf("err = %v, want a QuorumError matching context.Canceled", err)
				}
				t.Logf("cancelled attempt: %v (not asked %v, unanswered %v)", err, qe.NotAsked, qe.Unanswered)
			case <-time.After(10 * time.Second):
				t.Fatal("the attempt did not end with its ctx")
			}
			// The lead runs the SET now, within the per-master timeout.
			if err := servers[lead].Resume(); err != nil {
				t.Fatal(err)
			}
			if !redistest.WaitFor(ctx5s(t), func() bool { return setCalls(t, servers[lead]) > before[lead] }) {
				t.Fatal("the lead never ran the SET")
			}
			if !redistest.WaitFor(ctx5s(t), func() bool { return !exists(t, servers[lead], key) }) {
				t.Fatal("the lead's late grant was not rolled back")
			}
			time.Sleep(200 * time.Millisecond) // the subject: a spell in which a late SET would show on another master
			onlyLeadAsked(t, servers, lead, before, key)
			closed := make(chan struct{})
			go func() { c.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("Close hangs")
			}
		})
	}
}

// Close while a led attempt waits for its stopped lead: Close and the
// attempt return, the other masters are never asked, and nothing is
// left on them once the lead runs again.
func TestLead_closeDuringLedRound(t *testing.T) {
	redistest.SkipShort(t)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			servers := redistest.Start(t, 5)
			c := leadClient(t, servers, p.pipelined, WithTimeout(500*time.Millisecond))
			key := "leadstop:close:" + p.name
			lead := c.leadFor(key)
			before := allSetCalls(t, servers)
			paused(t, servers[lead])
			done := ledAttemptGo(context.Background(), c, key, lead)
			// The SET's bytes reach the stopped lead's socket: nothing
			// shows that while the process is stopped.
			time.Sleep(100 * time.Millisecond)
			closed := make(chan struct{})
			go func() { c.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("Close hangs while the lead is stopped")
			}
			select {
			case err := <-done:
				t.Logf("attempt: %v", err)
				if err == nil {
					t.Fatal("the attempt succeeded with its lead stopped")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the attempt did not end")
			}
			if err := servers[lead].Resume(); err != nil {
				t.Fatal(err)
			}
			// the subject: a spell for the resumed lead to run what it read; no other master may be asked
			time.Sleep(300 * time.Millisecond)
			onlyLeadAsked(t, servers, lead, before, key)
			if exists(t, servers[lead], key) {
				// Expected: the client closed before the lead ran the SET,
				// so nothing could undo it (as for any attempt).
				pttl, _ := servers[lead].Do("PTTL", key)
				t.Logf("the lead holds the closed client's late grant (PTTL %v): it expires at its TTL", pttl)
			}
		})
	}
}
