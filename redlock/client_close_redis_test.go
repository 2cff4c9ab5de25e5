package redlock_test

// What a Client's Close ends: its Done channel, every Observe of its
// elections, Leader and Inspect, and every goroutine it started.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// closePoolCase is one way to give a Client its masters' pools: the
// package's pools or the user's own *redis.Pool, on either path. The
// pools stay open after the Client's Close (the caller's), so a goroutine
// that outlives Close could still reach the masters through them.
type closePoolCase struct {
	name  string
	path  connPath
	pools func(t *testing.T, servers []*redistest.Server) []pool.Pool
}

func packagePools(t *testing.T, servers []*redistest.Server) []pool.Pool {
	ps := make([]pool.Pool, len(servers))
	for i, s := range servers {
		ps[i] = s.Pool()
	}
	return ps
}

func userRedigoPools(t *testing.T, servers []*redistest.Server) []pool.Pool {
	ps := make([]pool.Pool, len(servers))
	for i, s := range servers {
		rp, _ := redigoPool(t, s.Addr(), fmt.Sprintf("user-%d", i), true)
		ps[i] = rp
	}
	return ps
}

var closePoolCases = []closePoolCase{
	{"pipelined", pipelinedPath, packagePools},
	{"pooled", pooledPath, packagePools},
	{"pipelined user redis.Pool", pipelinedPath, userRedigoPools},
	{"pooled user redis.Pool", pooledPath, userRedigoPools},
}

// closeCaseClient is a Client of pools on the case's path; the test closes
// it (and t.Cleanup once more, which does nothing).
func closeCaseClient(t *testing.T, pc closePoolCase, pools []pool.Pool) *redlock.Client {
	t.Helper()
	c, err := redigo.New(pools, testOptions(pc.path, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// nextLeader receives from an Observe channel within d; ok false when it
// closed.
func nextLeader(t *testing.T, ch <-chan election.Leader, d time.Duration) (election.Leader, bool) {
	t.Helper()
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case ld, ok := <-ch:
		return ld, ok
	case <-tm.C:
		t.Fatalf("Observe sent nothing and stayed open for %v", d)
	}
	return election.Leader{}, false
}

// drainObserve receives from an Observe channel until it closes, failing
// the test if it stays open for d.
func drainObserve(t *testing.T, ch <-chan election.Leader, d time.Duration) {
	t.Helper()
	for {
		if _, ok := nextLeader(t, ch, d); !ok {
			return
		}
	}
}

// An election observed through a Client that then closes: Done is closed
// by Close, the Observe channel closes (its goroutine stops reading the
// masters, though the pools stay open), Leader and Inspect return
// ErrClosed, and a leader elected by another client after the Close is
// neither returned nor observed.
func TestElection_observeEndsWhenClientCloses(t *testing.T) {
	for _, pc := range closePoolCases {
		t.Run(pc.name, func(t *testing.T) {
			for _, n := range []int{1, 3} {
				t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
					servers := redistest.Start(t, n)
					pools := pc.pools(t, servers)
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					watcher := closeCaseClient(t, pc, pools)
					candidates := closeCaseClient(t, pc, pools)
					const ttl = 2 * time.Second
					we := electionOf(t, watcher, "close-leader", ttl)
					ce := electionOf(t, candidates, "close-leader", ttl)

					seen := we.Observe(context.Background())
					first, err := ce.Campaign(ctx, "before-close")
					if err != nil {
						t.Fatal(err)
					}
					if ld, ok := nextLeader(t, seen, 10*time.Second); !ok || ld.Term != first.Term() {
						t.Fatalf("observed %+v (open %v), want term %d", ld, ok, first.Term())
					}
					select {
					case <-watcher.Done():
						t.Fatal("Done closed before Close")
					default:
					}

					if err := watcher.Close(); err != nil {
						t.Fatal(err)
					}
					select {
					case <-watcher.Done():
					default:
						t.Fatal("Done not closed after Close")
					}
					if _, err := we.Leader(ctx); !errors.Is(err, redlock.ErrClosed) {
						t.Errorf("Leader on a closed client: %v, want ErrClosed", err)
					}
					if _, err := watcher.Inspect(ctx, "close-leader"); !errors.Is(err, redlock.ErrClosed) {
						t.Errorf("Inspect on a closed client: %v, want ErrClosed", err)
					}

					// A new leader, elected after the Close.
					if err := first.Resign(ctx); err != nil {
						t.Fatal(err)
					}
					second, err := ce.Campaign(ctx, "after-close")
					if err != nil {
						t.Fatal(err)
					}
					defer second.Resign(context.Background())
					if ld, err := we.Leader(ctx); err == nil || ld.Term == second.Term() {
						t.Errorf("Leader on a closed client named the leader elected after Close: %+v, %v", ld, err)
					}
					for {
						ld, ok := nextLeader(t, seen, 5*time.Second)
						if !ok {
							break
						}
						if ld.Term > first.Term() {
							t.Fatalf("observer of a closed client reported a leader elected after Close: %+v", ld)
						}
					}
					// A later Observe of the closed client ends at once.
					if _, ok := nextLeader(t, we.Observe(context.Background()), 5*time.Second); ok {
						t.Error("Observe on a closed client sent a leader")
					}
				})
			}
		})
	}
}

// Done is the zero Client's nil channel (it can never be closed), and a
// Client's is closed once Close is called, and stays so.
func TestClient_Done(t *testing.T) {
	var zero redlock.Client
	if zero.Done() != nil {
		t.Error("the zero Client's Done is not nil")
	}
	rs := startReal(t, 1)
	c := rs.client(t, pipelinedPath)
	d := c.Done()
	if d != c.Done() {
		t.Error("Done returned two channels")
	}
	select {
	case <-d:
		t.Fatal("Done closed before Close")
	default:
	}
	c.Close()
	c.Close()
	select {
	case <-d:
	default:
		t.Fatal("Done not closed after Close")
	}
}

// A Client that ran an Observe, an auto-extended lock, a waiter (with the
// release-notice subscription it starts) and a Leader read leaves no
// goroutine running once Close returned and the waiter's Acquire returned
// ErrClosed: on both paths, with the package's pools and the user's own.
func TestClient_closeEndsEveryGoroutine(t *testing.T) {
	for _, pc := range closePoolCases {
		t.Run(pc.name, func(t *testing.T) {
			servers := redistest.Start(t, 3)
			pools := pc.pools(t, servers)
			// The waiter's key, held by a foreign token on every master.
			for _, s := range servers {
				if _, err := s.Do("SET", "close-busy", "someone-else", "PX", 60000); err != nil {
					t.Fatal(err)
				}
			}
			ignore := goleak.IgnoreCurrent()
			c := closeCaseClient(t, pc, pools)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			e := electionOf(t, c, "close-elect", 2*time.Second)
			seen := e.Observe(context.Background())
			ld, err := e.Campaign(ctx, "me")
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := nextLeader(t, seen, 10*time.Second); !ok || got.Term != ld.Term() {
				t.Fatalf("observed %+v, want term %d", got, ld.Term())
			}
			auto, err := c.Acquire(ctx, "close-auto", redlock.WithTTL(time.Second), redlock.WithAutoExtend(0))
			if err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 1)
			go func() {
				_, err := c.Acquire(context.Background(), "close-busy")
				waited <- err
			}()
			// The waiter waits once every master has its subscription.
			eventually(t, "the waiter did not subscribe", func() bool {
				for _, s := range servers {
					v, err := redis.Values(s.Do("PUBSUB", "NUMSUB", layout.WakeChannel("close-busy")))
					if err != nil || len(v) != 2 || v[1] != int64(1) {
						return false
					}
				}
				return true
			})
			if _, err := e.Leader(ctx); err != nil {
				t.Fatal(err)
			}

			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-waited:
				if !errors.Is(err, redlock.ErrClosed) {
					t.Errorf("waiter: %v, want ErrClosed", err)
				}
			case <-ctx.Done():
				t.Fatal("the waiter's Acquire did not end at Close")
			}
			if !errors.Is(auto.Err(), redlock.ErrClosed) {
				t.Errorf("auto-extended lock after Close: %v", auto.Err())
			}
			drainObserve(t, seen, 5*time.Second)
			goleak.VerifyNone(t, ignore)
		})
	}
}

// A stopped master (SIGSTOP) does not hold Close up behind an observer's
// read of it: the read ends with the client, Close returns within its
// usual bounds, and the observer's channel closes.
func TestElection_observeOfAStoppedMasterEndsAtClose(t *testing.T) {
	for _, pc := range closePoolCases {
		t.Run(pc.name, func(t *testing.T) {
			servers := redistest.Start(t, 3)
			c := closeCaseClient(t, pc, pc.pools(t, servers))
			e := electionOf(t, c, "close-stopped", time.Second)
			seen := e.Observe(context.Background())
			ctx := ctxT(t)
			if _, err := e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
				t.Fatalf("Leader before the stop: %v", err) // the client has met the masters
			}
			reads := servers[1].Calls("eval")
			if err := servers[0].Pause(); err != nil {
				t.Fatal(err)
			}
			defer servers[0].Resume()
			// A reading after the stop: every master is read at once, so
			// the stopped one's read is under way.
			if !redistest.WaitFor(ctx, func() bool { return servers[1].Calls("eval") > reads }) {
				t.Fatal("the observer read no more")
			}
			start := time.Now()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			// Close gives what is in flight one per-master timeout, and a
			// transport one more (redlock.Client.Close); a second of slack
			// for a loaded machine.
			if took := time.Since(start); took > 2*realTimeout+time.Second {
				t.Errorf("Close took %v behind an observer's read of a stopped master", took)
			}
			drainObserve(t, seen, 5*time.Second)
		})
	}
}

// electionOf is an election on key with a TTL of ttl.
func electionOf(t *testing.T, c *redlock.Client, key string, ttl time.Duration) *election.Election {
	e, err := election.New(c, key, election.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	return e
}
