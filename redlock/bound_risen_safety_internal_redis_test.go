package redlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/pool"
)

// risingPools are pools of the masters reals, each behind a proxy that
// holds every command named name for delays[i] on master i; while armed,
// each such command reaching a proxy notes, for every master of the
// Client set in c, an answer that took slow, read now: as the late
// answers of other rounds, read while a round waits, raise the bound.
type risingPools struct {
	pools []pool.Pool
	c     atomic.Pointer[Client]
	armed atomic.Bool
	// first is when (Unix ns) the first such command reached a proxy
	// since it was last set to 0.
	first atomic.Int64
}

func newRisingPools(t *testing.T, reals []*redistest.Server, name string, delays []time.Duration, slow time.Duration) *risingPools {
	t.Helper()
	rp := &risingPools{pools: make([]pool.Pool, len(reals))}
	quit := make(chan struct{})
	t.Cleanup(func() { close(quit) })
	for i, s := range reals {
		px := hostile.NewProxy(t, s.Addr(), func(_ *hostile.Conn, cmd []string) hostile.Verdict {
			if !strings.EqualFold(cmd[0], name) {
				return hostile.Forward
			}
			rp.first.CompareAndSwap(0, time.Now().UnixNano())
			if c := rp.c.Load(); c != nil && rp.armed.Load() {
				now := time.Now()
				for j := range c.masters {
					c.bound.Note(j, now.Add(-slow), now)
				}
			}
			if delays[i] > 0 {
				hostile.Hold(delays[i], quit)
			}
			return hostile.Forward
		})
		p, err := pool.New(px.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		rp.pools[i] = p
	}
	return rp
}

// client makes the identified Client on the pools, armed.
func (rp *risingPools) client(t *testing.T, pipelined bool, opts ...Option) *Client {
	t.Helper()
	c := identified(t)(newRedigo(rp.pools, append([]Option{withPipelining(pipelined), WithTimeout(50 * time.Millisecond)}, opts...)...))
	rp.c.Store(c)
	rp.armed.Store(true)
	return c
}

func each(d time.Duration, n int) []time.Duration {
	ds := make([]time.Duration, n)
	for i := range ds {
		ds[i] = d
	}
	return ds
}

var paths = map[bool]string{true: "pipelined", false: "pooled"}

// A round that waits on because the bound rose returns a lock whose
// validity ends no later than its start, the TTL and the drift, and whose
// key lives, on a quorum of masters, at least until then: the masters
// answer at 80 ms, past the 50 ms timeout, within the 300 ms cap of a
// 3 s TTL (a cap well past the delay, so that a busy host's scheduling
// does not take the answers beyond it: that case is the next test's).
func TestAdaptiveBound_risenWaitLeavesTheKeyLiveUntilUntil(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(paths[pipelined], func(t *testing.T) {
			servers := redistest.Start(t, 3)
			rp := newRisingPools(t, servers, "SET", each(80*time.Millisecond, 3), 2*time.Second)
			c := rp.client(t, pipelined)
			const ttl = 3 * time.Second
			ctx := context.Background()
			for i := range 5 {
				key := "risen:live:" + string(rune('a'+i))
				rp.first.Store(0)
				l, err := c.TryAcquire(ctx, key, WithTTL(ttl))
				if err != nil {
					t.Fatalf("TryAcquire %d, masters at 80 ms, cap %v: %v", i, c.bound.Ceiling(ttl), err)
				}
				now := time.Now()
				until := l.Until()
				// The call started before its first SET reached a master.
				if limit := time.Unix(0, rp.first.Load()).Add(ttl - c.drift(ttl)); until.After(limit) {
					t.Errorf("Until %v past the first SET + TTL - drift %v", until, limit)
				}
				if !until.After(now) {
					t.Errorf("a lock returned with its validity over (%v ago)", now.Sub(until))
				}
				live := 0
				for _, s := range servers {
					read := time.Now()
					pttl, err := redis.Int64(s.Do("PTTL", key))
					if err == nil && pttl > 0 && !read.Add(time.Duration(pttl)*time.Millisecond).Before(until.Add(-time.Millisecond)) {
						live++
					}
				}
				if live < c.quorum {
					t.Errorf("the key lives until Until on %d masters, want a quorum (%d)", live, c.quorum)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatalf("release: %v", err)
				}
			}
		})
	}
}

// Where the cap does not let the round wait for the masters — a TTL of
// 500 ms whose tenth is the timeout, or masters slower than the 100 ms
// cap of a 1 s TTL — the round fails, and every grant, read in the wait
// or after, is rolled back after its SET: the key is gone from every
// master well before its TTL would have ended it. The masters answer
// past the cap by more than a timeout: within that, a round's patience
// may count a grant a busy process read late.
func TestAdaptiveBound_risenWaitBeyondTheCapRollsBack(t *testing.T) {
	cases := []struct {
		name  string
		ttl   time.Duration
		delay time.Duration
	}{
		{"ttl500ms_capIsTheTimeout", 500 * time.Millisecond, 180 * time.Millisecond},
		{"ttl1s_mastersPastTheCap", time.Second, 250 * time.Millisecond},
	}
	for _, tc := range cases {
		for _, pipelined := range []bool{true, false} {
			t.Run(tc.name+"/"+paths[pipelined], func(t *testing.T) {
				servers := redistest.Start(t, 3)
				rp := newRisingPools(t, servers, "SET", each(tc.delay, 3), 2*time.Second)
				c := rp.client(t, pipelined)
				ctx := context.Background()
				start := time.Now()
				_, err := c.TryAcquire(ctx, "risen:capped", WithTTL(tc.ttl))
				took := time.Since(start)
				if !errors.Is(err, ErrNotAcquired) {
					t.Fatalf("TryAcquire, masters at %v, cap %v: %v, want ErrNotAcquired", tc.delay, c.bound.Ceiling(tc.ttl), err)
				}
				if limit := c.bound.Ceiling(tc.ttl) + stall.LateBound(c.timeout); took > limit {
					t.Errorf("failed after %v, want within %v", took, limit)
				}
				// The SETs run at start+delay; the TTL would end them at
				// start+delay+TTL. Gone well before: rolled back.
				by := start.Add(tc.delay + tc.ttl - 150*time.Millisecond)
				for i, s := range servers {
					if !s.WaitAbsent("risen:capped", time.Until(by)) {
						t.Errorf("master %d still holds the failed attempt's key %v after its start", i, time.Since(start))
					}
				}
			})
		}
	}
}

// A grant read during the risen wait, of a round that then fails (two of
// three masters stopped, SIGSTOP): it is rolled back on its master, after
// its SET; the stopped masters' SETs, run once they resume, are rolled
// back too.
func TestAdaptiveBound_grantReadInRisenWaitIsRolledBack_pausedMaster(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(paths[pipelined], func(t *testing.T) {
			servers := redistest.Start(t, 3)
			rp := newRisingPools(t, servers, "SET", []time.Duration{70 * time.Millisecond, 0, 0}, 2*time.Second)
			c := rp.client(t, pipelined)
			const ttl = time.Second
			for _, s := range servers[1:] {
				paused(t, s)
			}
			ctx := context.Background()
			start := time.Now()
			_, err := c.TryAcquire(ctx, "risen:rollback", WithTTL(ttl))
			took := time.Since(start)
			var qe *QuorumError
			if !errors.As(err, &qe) || !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("TryAcquire with two masters stopped: %v", err)
			}
			if qe.Succeeded != 1 {
				t.Fatalf("the grant of master 0 (at 70 ms, past the 50 ms timeout) was not counted in the risen wait: %+v after %v", qe, took)
			}
			t.Logf("failed after %v: %v", took, err)
			if limit := c.bound.Ceiling(ttl) + stall.LateBound(c.timeout); took > limit {
				t.Errorf("failed after %v, want within %v", took, limit)
			}
			if !servers[0].WaitAbsent("risen:rollback", 500*time.Millisecond) {
				t.Errorf("master 0 still holds the grant read in the risen wait, %v after the start", time.Since(start))
			}
			resumed := time.Now()
			for _, s := range servers[1:] {
				if err := s.Resume(); err != nil {
					t.Fatal(err)
				}
			}
			for i, s := range servers[1:] {
				if !s.WaitAbsent("risen:rollback", ttl-300*time.Millisecond) {
					t.Errorf("master %d still holds the late SET %v after it resumed", i+1, time.Since(resumed))
				}
			}
		})
	}
}

// twoStoppedRising is a Client on three masters, two of them stopped
// (SIGSTOP), whose SETs raise the bound to its cap as they reach them.
func twoStoppedRising(t *testing.T, pipelined bool) *Client {
	t.Helper()
	servers := redistest.Start(t, 3)
	rp := newRisingPools(t, servers, "SET", each(0, 3), 2*time.Second)
	c := rp.client(t, pipelined)
	for _, s := range servers[1:] {
		paused(t, s)
	}
	return c
}

// Two of three masters stopped, the bound risen during the round to the
// 1 s cap of a 10 s TTL: the caller's ctx ends the risen wait; Close
// ends it when it completes the commands in flight (a pipelined
// connection, within a timeout or two), or the round ends at the cap (a
// pooled read, which Close waits out). Each limit leaves a busy host
// 300 ms of scheduling, and the cap is far enough to tell.
func TestAdaptiveBound_risenWaitEndsAtCtxAndClose_pausedMaster(t *testing.T) {
	const ttl, slack = 10 * time.Second, 300 * time.Millisecond
	for _, pipelined := range []bool{true, false} {
		t.Run(paths[pipelined]+"/ctx", func(t *testing.T) {
			c := twoStoppedRising(t, pipelined)
			if ceiling := c.bound.Ceiling(ttl); ceiling < 90*time.Millisecond+c.timeout+2*slack {
				t.Fatalf("the cap %v is too close to the ctx's end to tell the two apart", ceiling)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := c.TryAcquire(ctx, "risen:ctx", WithTTL(ttl))
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("TryAcquire under a 90 ms ctx: %v, want its DeadlineExceeded", err)
			}
			t.Logf("returned after %v: %v", took, err)
			if took > 90*time.Millisecond+c.timeout+slack {
				t.Errorf("returned %v after the start, the ctx ended at 90 ms", took)
			}
		})
		t.Run(paths[pipelined]+"/close", func(t *testing.T) {
			c := twoStoppedRising(t, pipelined)
			var closedAt atomic.Int64
			closed := make(chan struct{})
			timer := time.AfterFunc(90*time.Millisecond, func() {
				closedAt.Store(time.Now().UnixNano())
				c.Close()
				close(closed)
			})
			defer timer.Stop()
			start := time.Now()
			_, err := c.TryAcquire(context.Background(), "risen:close", WithTTL(ttl))
			end := time.Now()
			<-closed
			if err == nil {
				t.Fatal("TryAcquire with two masters stopped succeeded")
			}
			at := time.Unix(0, closedAt.Load())
			if at.IsZero() || at.After(end) {
				t.Fatalf("the round ended (%v, after %v) before Close began: the risen wait was not entered", err, end.Sub(start))
			}
			t.Logf("returned %v after Close began (%v after the start): %v", end.Sub(at), end.Sub(start), err)
			// Close completes the commands in flight within a timeout or
			// two (pipelined); a pooled read it waits out, and the round
			// then ends at its risen wait, the cap.
			limit := at.Add(2 * c.timeout)
			if !pipelined {
				limit = later(limit, start.Add(c.bound.Ceiling(ttl)))
			}
			if end.After(limit.Add(slack)) {
				t.Errorf("returned %v after Close began, %v after the start: %v", end.Sub(at), end.Sub(start), err)
			}
		})
	}
}

// Rounds that wait on do not feed the bound: two masters answer in
// 40 ms, the third is stopped; twenty rounds in a row reach their quorum
// at 40 ms, and the bound stays at twice that, not climbing round after
// round towards its cap (a second). On a loaded host the quorum's
// answers take longer and this process stalls, and the bound follows
// both: it is held to twice the longest round and the longest stall a
// probe of the test's own saw (a 1 ms ticker's lateness, apart from the
// client's stall detector), when that is above the quiet host's 200 ms.
func TestAdaptiveBound_risenWaitDoesNotFeedTheBound_pausedMaster(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(paths[pipelined], func(t *testing.T) {
			servers := redistest.Start(t, 3)
			rp := newRisingPools(t, servers, "SET", []time.Duration{40 * time.Millisecond, 40 * time.Millisecond, 0}, 0)
			c := rp.client(t, pipelined)
			rp.armed.Store(false)
			paused(t, servers[2])
			const ttl = 10 * time.Second
			ctx := context.Background()
			var worst, last, longest time.Duration
			probe := stallProbe(t)
			for i := range 20 {
				start := time.Now()
				l, err := c.TryAcquire(ctx, "risen:feed:"+string(rune('a'+i)), WithTTL(ttl))
				took := time.Since(start)
				if err != nil {
					t.Fatalf("TryAcquire %d: %v after %v", i, err, took)
				}
				longest = max(longest, took)
				_ = l.Release(ctx)
				last = c.bound.For(ttl, time.Now())
				worst = max(worst, last)
			}
			stalled := probe()
			limit := max(200*time.Millisecond, 2*max(longest, stalled)+20*time.Millisecond)
			t.Logf("bound after 20 rounds %v, highest %v (longest round %v, longest stall %v, limit %v)", last, worst, longest, stalled, limit)
			if worst > limit {
				t.Errorf("the bound reached %v (last %v) with a quorum answering in 40 ms: over %v", worst, last, limit)
			}
		})
	}
}

// A woken waiter's round asks its lead master first, the others once it
// granted. With the bound risen during the round (answers of 150 ms noted
// at its start: a wait of 300 ms), a lead that grants past the round's
// first deadline starts the other legs then, their deadline already past:
// at 70 ms, and at 120 ms (past the first deadline and a timeout, when a
// led leg's wait for the lead expires but for the patience of a
// transport that reads its own replies). The round succeeds, its
// validity counted from before the lead's SET.
func TestLead_risenWaitSendsTheLedLegsLate(t *testing.T) {
	for _, lead := range []time.Duration{70 * time.Millisecond, 120 * time.Millisecond} {
		for _, pipelined := range []bool{true, false} {
			t.Run(lead.String()+"/"+paths[pipelined], func(t *testing.T) {
				servers := redistest.Start(t, 3)
				rp := newRisingPools(t, servers, "SET", []time.Duration{lead, 0, 0}, 150*time.Millisecond)
				c := rp.client(t, pipelined)
				ledRisen(t, c, rp, lead)
			})
		}
	}
}

// ledRisen makes a led attempt (lead master 0, whose SET is held for lead)
// on c and checks that it succeeds within its validity.
func ledRisen(t *testing.T, c *Client, rp *risingPools, lead time.Duration) {
	t.Helper()
	const ttl = 10 * time.Second
	rp.first.Store(0)
	start := time.Now()
	l, err := ledAttempt(t, c, "risen:led", ttl, 0)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("led attempt, lead at %v, bound risen to %v: %v after %v", lead, c.bound.For(ttl, time.Now()), err, took)
	}
	if until := l.Until(); until.After(time.Unix(0, rp.first.Load()).Add(ttl - c.drift(ttl))) {
		t.Errorf("Until %v past the lead's SET + TTL - drift", until)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A stall of this process raises the bound to twice its length. One seen
// by another timer while a round waited (30 ms, from 15 to 45 ms into a
// 50 ms wait) extends the round when it was longer than half the wait, to
// twice the stall from its start; a shorter one (20 ms) does not; nor
// does a stall of 30 ms that held up the round's own timer (longer than
// the wait it would have to be).
func TestAdaptiveBound_aStallExtendsARoundToTwiceItsLength(t *testing.T) {
	c := leadClient(t, redistest.Start(t, 3), true, WithTimeout(50*time.Millisecond))
	at := func(start time.Time, ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	round := func(start time.Time) *round {
		r := newRound(3)
		r.op, r.ttlMS = opAcquire, 10_000
		r.wait, r.deadline = c.timeout, start.Add(c.timeout)
		return r
	}
	cases := []struct {
		name                    string
		from, to, now, wantMore int // ms from the round's start
	}{
		{"30msSeenMeanwhile", 15, 45, 50, 10},
		{"20msSeenMeanwhile", 25, 45, 50, 0},
		{"30msOfItsOwnTimer", 50, 80, 80, 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Each case a minute after the last: the earlier stalls have
			// decayed to nothing (and Note keeps the latest).
			start := time.Now().Add(time.Duration(i+1) * time.Minute)
			c.stalls.Note(at(start, tc.from), at(start, tc.to))
			_, more := c.boundRisen(round(start), c.timeout, at(start, tc.now))
			want := time.Duration(tc.wantMore) * time.Millisecond
			if more < want-time.Millisecond || more > want+time.Millisecond {
				t.Errorf("stall from %d to %d ms, round's timer read at %d ms: waits on %v, want %v", tc.from, tc.to, tc.now, more, want)
			}
		})
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Two Clients race for one key, both waiting on as the bound rises (every
// master answers at 80 ms, past the timeout, within the 100 ms cap of a
// 1 s TTL), one master stopped (SIGSTOP): never do both hold it with
// their validities overlapping.
func TestAdaptiveBound_risenWaitsOfTwoClientsNeverBothHold_pausedMaster(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		t.Run(paths[pipelined], func(t *testing.T) {
			servers := redistest.Start(t, 3)
			var cs [2]*Client
			for i := range cs {
				rp := newRisingPools(t, servers, "SET", each(80*time.Millisecond, 3), 2*time.Second)
				cs[i] = rp.client(t, pipelined)
			}
			paused(t, servers[2])
			const ttl = time.Second
			ctx := context.Background()
			won := 0
			for i := range 10 {
				key := "risen:race:" + string(rune('a'+i))
				type got struct {
					l   *Lock
					err error
				}
				res := make(chan got, 2)
				for _, c := range cs {
					go func() {
						l, err := c.TryAcquire(ctx, key, WithTTL(ttl))
						res <- got{l, err}
					}()
				}
				a, b := <-res, <-res
				if a.err == nil && b.err == nil {
					t.Fatalf("both Clients hold %q: until %v and %v", key, a.l.Until(), b.l.Until())
				}
				for _, g := range []got{a, b} {
					if g.err == nil {
						won++
						_ = g.l.Release(ctx)
					}
				}
			}
			t.Logf("%d of 10 races won by one Client", won)
		})
	}
}

// stallProbe starts a 1 ms ticker that measures how late it fires (this
// process's stalls, as the host imposes them); the returned func stops
// it and returns the longest lateness seen.
func stallProbe(t *testing.T) func() time.Duration {
	t.Helper()
	done, out := make(chan struct{}), make(chan time.Duration, 1)
	go func() {
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		var worst time.Duration
		prev := time.Now()
		for {
			select {
			case <-done:
				out <- worst
				return
			case <-tk.C:
				now := time.Now()
				worst = max(worst, now.Sub(prev)-time.Millisecond)
				prev = now
			}
		}
	}()
	var once sync.Once
	var got time.Duration
	stop := func() time.Duration {
		once.Do(func() {
			close(done)
			got = <-out
		})
		return got
	}
	t.Cleanup(func() { stop() })
	return stop
}
