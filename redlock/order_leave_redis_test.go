package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// A waiter that gives up — a writer whose intent holds readers back, a
// fair waiter in the key's queue — withdraws what it left on the masters
// in the background. The client's next acquisition of the key, by another
// writer or waiter of the same client, must not reach a master before that
// withdrawal: it would be turned away there by the client's own intent or
// queue entry, which is on its way out.
type leaveCase struct {
	name string
	// block has another client hold key so that first is refused, and
	// returns its release.
	block func(ctx context.Context, other *redlock.Client, key string) (func(context.Context) error, error)
	// first is the attempt that is refused and leaves; next is the
	// client's next acquisition of the key once the block is gone.
	first, next func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error)
	// gone reports whether master s is free of the block; holds, whether
	// it holds tok's hold (of next's kind).
	gone, holds func(t *testing.T, s *redistest.Server, key, tok string) bool
	// put and take are the commands that put such a hold of another
	// client on one master by hand, and take it away.
	put, take func(key string) []string
}

func leaveCases() []leaveCase {
	read := func(ctx context.Context, other *redlock.Client, key string) (func(context.Context) error, error) {
		return releaser(other.TryAcquireRead(ctx, key))
	}
	noReader := func(t *testing.T, s *redistest.Server, key, _ string) bool {
		fields, err := redis.Strings(s.Do("HKEYS", key))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fields {
			if strings.HasPrefix(f, "r:") {
				return false
			}
		}
		return true
	}
	write := func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
		return c.TryAcquireWrite(ctx, key)
	}
	fair := func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
		return c.TryAcquire(ctx, key, redlock.WithFair())
	}
	field := func(prefix string) func(t *testing.T, s *redistest.Server, key, tok string) bool {
		return func(t *testing.T, s *redistest.Server, key, tok string) bool {
			n, err := redis.Int(s.Do("HEXISTS", key, prefix+tok))
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		}
	}
	// A reader's entry, by hand: it expires in a day (rw.lua).
	putReader := func(key string) []string {
		return []string{"HSET", key, "r:other", strconv.FormatInt(time.Now().Add(24*time.Hour).UnixMilli(), 10)}
	}
	takeReader := func(key string) []string { return []string{"HDEL", key, "r:other"} }
	return []leaveCase{
		{
			name: "write after a writer gave up", block: read, first: write, next: write, gone: noReader, holds: field("w:"),
			put: putReader, take: takeReader,
		},
		{
			name: "read after a writer gave up", block: read, first: write, gone: noReader, holds: field("r:"),
			put: putReader, take: takeReader,
			next: func(ctx context.Context, c *redlock.Client, key string) (*redlock.Lock, error) {
				return c.TryAcquireRead(ctx, key)
			},
		},
		{
			name: "fair after a fair waiter gave up", first: fair, next: fair,
			put:  func(key string) []string { return []string{"SET", key, "other", "PX", "86400000"} },
			take: func(key string) []string { return []string{"DEL", key} },
			block: func(ctx context.Context, other *redlock.Client, key string) (func(context.Context) error, error) {
				return releaser(fair(ctx, other, key))
			},
			gone: func(t *testing.T, s *redistest.Server, key, _ string) bool {
				n, err := redis.Int(s.Do("EXISTS", key))
				if err != nil {
					t.Fatal(err)
				}
				return n == 0
			},
			holds: func(t *testing.T, s *redistest.Server, key, tok string) bool {
				v, err := redis.String(s.Do("GET", key))
				if err != nil && !errors.Is(err, redis.ErrNil) {
					t.Fatal(err)
				}
				return v == tok
			},
		},
	}
}

// isLeave reports whether cmd, as a proxy reads it, is a leave of key: a
// writer's withdrawal of its intent, or a fair waiter's of its queue entry.
func isLeave(cmd []string, key string) bool {
	if (cmd[0] != "EVALSHA" && cmd[0] != "EVAL") || len(cmd) < 5 {
		return false
	}
	return cmd[3] == layout.QueueKey(key) || cmd[3] == key && cmd[4] == "leave"
}

// leaveHold is a proxy's hook on one master: it holds the first leave of
// key it reads until the client's next acquisition has run on the master
// (the hook runs that itself, ahead of the leave) or, should that
// acquisition wait for the leave, for hold after it started.
type leaveHold struct {
	s       *redistest.Server
	key     string
	hold    time.Duration
	started <-chan struct{} // closed as the next acquisition starts
	seen    chan struct{}   // closed once the leave is held
	ran     chan struct{}   // closed once the next acquisition ran ahead of it

	mu sync.Mutex
	// state is 0 before the leave, 1 while it is held, 2 once the next
	// acquisition ran ahead of it, 3 once it ran.
	state int
}

func newLeaveHold(s *redistest.Server, key string, hold time.Duration, started <-chan struct{}) *leaveHold {
	return &leaveHold{s: s, key: key, hold: hold, started: started, seen: make(chan struct{}), ran: make(chan struct{})}
}

// move takes the state from from to to, and reports whether it was from.
func (h *leaveHold) move(from, to int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != from {
		return false
	}
	h.state = to
	return true
}

// overtaken reports whether the next acquisition ran ahead of the leave.
func (h *leaveHold) overtaken() bool {
	select {
	case <-h.ran:
		return true
	default:
		return false
	}
}

func (h *leaveHold) hook(c *hostile.Conn, cmd []string) hostile.Verdict {
	switch {
	case isLeave(cmd, h.key):
		if !h.move(0, 1) {
			return hostile.Forward
		}
		close(h.seen)
		select {
		case <-h.started:
		case <-c.Quit():
			return hostile.HangUp
		}
		timer := time.NewTimer(h.hold)
		defer timer.Stop()
		select {
		case <-h.ran:
		case <-timer.C:
		case <-c.Quit():
			return hostile.HangUp
		}
		h.move(1, 3)
		return hostile.Forward
	case (cmd[0] == "EVALSHA" || cmd[0] == "EVAL") && len(cmd) > 3 && cmd[3] == h.key:
		if !h.move(1, 2) {
			return hostile.Forward
		}
		v, err := h.s.Run(cmd)
		var re redis.Error
		if err != nil && !errors.As(err, &re) {
			return hostile.HangUp
		}
		if err != nil {
			v = re
		}
		close(h.ran)
		_ = c.Write(hostile.EncodeReply(v))
		return hostile.Drop
	}
	return hostile.Forward
}

// The leave is held on two masters of three (their proxies), until the
// client's next acquisition has run there or, should that acquisition
// wait for the leave, a while after it started. Run first, the next
// acquisition is refused on both by the client's own intent or queue
// entry, and fails.
func TestOrder_nextAcquisitionFollowsTheClientsLeave(t *testing.T) {
	const hold = 300 * time.Millisecond // well within the next attempt's bound, the 2 s timeout
	for _, tc := range leaveCases() {
		t.Run(tc.name, func(t *testing.T) {
			rs := startReal(t, 3)
			ctx := ctxT(t)
			key := "leave-order"
			started := make(chan struct{})
			addrs := []string{rs.servers[0].Addr()}
			var holds []*leaveHold
			for _, s := range rs.servers[1:] {
				h := newLeaveHold(s, key, hold, started)
				holds = append(holds, h)
				addrs = append(addrs, hostile.NewProxy(t, s.Addr(), h.hook).Addr())
			}
			c := addrClient(t, pooledPath, addrs, redlock.WithTimeout(2*time.Second))
			other := rs.client(t, pooledPath)
			// The client's first contact (identity probe, scripts) is
			// done before the attempts tested.
			warm, err := c.TryAcquire(ctx, "warm-up")
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}

			release, err := tc.block(ctx, other, key)
			if err != nil {
				t.Fatalf("the other client's hold: %v", err)
			}
			if _, err := tc.first(ctx, c, key); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("the first attempt, on a held key: %v", err)
			}
			for i, h := range holds {
				select {
				case <-h.seen:
				case <-time.After(5 * time.Second):
					t.Fatalf("the first attempt's leave did not reach master %d", i+1)
				}
			}
			if err := release(ctx); err != nil {
				t.Fatalf("the other client's release: %v", err)
			}
			waitUntil(t, "the other client's hold gone from every master", func() bool {
				for _, s := range rs.servers {
					if !tc.gone(t, s, key, "") {
						return false
					}
				}
				return true
			})
			close(started)
			l, err := tc.next(ctx, c, key)
			for i, h := range holds {
				if h.overtaken() {
					t.Errorf("the next acquisition ran on master %d before the client's leave", i+1)
				}
			}
			if err != nil {
				t.Fatalf("the next acquisition, on a key only the client's withdrawn attempt was left on: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Master 2 is stopped before the first attempt: refused by the others, it
// fails at once, and its leave reaches master 2 only once master 2 has
// answered the attempt, after it resumes. The other client's hold goes
// from every master meanwhile (on master 2, written to its socket before
// it resumes, so that it runs ahead of anything sent after). The client's
// next acquisition wins masters 0 and 1; on master 2 it must wait for the
// leave (bounded by its own deadline, well beyond the pause here), not run
// there ahead of it, turned away by the client's own intent or queue
// entry: once master 2 runs again, the next acquisition holds every
// master (and ran there after the leave, as master 2's MONITOR shows),
// and its release leaves nothing of the key on any.
func TestOrder_nextAcquisitionWaitsForTheLeaveOnAStoppedMaster(t *testing.T) {
	for _, tc := range leaveCases() {
		t.Run(tc.name, func(t *testing.T) {
			rs := startReal(t, 3)
			ctx := ctxT(t)
			key := "leave-stopped"
			c := rs.client(t, pooledPath, redlock.WithTimeout(2*time.Second))
			// First contact (identity probe) before the pause.
			if _, err := c.Inspect(ctx, "warm-up"); err != nil {
				t.Fatal(err)
			}
			for _, s := range rs.servers {
				if _, err := s.Run(tc.put(key)); err != nil {
					t.Fatal(err)
				}
			}
			// The connection that takes the other client's hold from master
			// 2 while it is stopped.
			raw, err := redis.Dial("tcp", rs.servers[2].Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			ran := rs.servers[2].Monitor(t)
			rs.pause(t, 2)
			if _, err := tc.first(ctx, c, key); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatalf("the first attempt, on a held key: %v", err)
			}
			for _, s := range rs.servers[:2] {
				if _, err := s.Run(tc.take(key)); err != nil {
					t.Fatal(err)
				}
			}
			take := tc.take(key)
			if err := raw.Send(take[0], redis.Args{}.AddFlat(take[1:])...); err != nil {
				t.Fatal(err)
			}
			if err := raw.Flush(); err != nil {
				t.Fatal(err)
			}
			l, err := tc.next(ctx, c, key)
			if err != nil {
				t.Fatalf("the next acquisition, with masters 0 and 1 free: %v", err)
			}
			if err := rs.servers[2].Resume(); err != nil {
				t.Fatal(err)
			}
			if _, err := raw.Receive(); err != nil {
				t.Fatal(err)
			}
			var leaveAt, nextAt int
			waitUntil(t, "master 2 ran the leave and the next acquisition", func() bool {
				cmds := ran.Commands()
				leaveAt = slices.IndexFunc(cmds, func(cmd []string) bool { return isLeave(cmd, key) })
				nextAt = slices.IndexFunc(cmds, func(cmd []string) bool {
					return len(cmd) > 0 && (cmd[0] == "EVALSHA" || cmd[0] == "EVAL") && slices.Contains(cmd, l.Token())
				})
				return leaveAt >= 0 && nextAt >= 0
			})
			if nextAt < leaveAt {
				t.Errorf("master 2 ran the next acquisition (command %d) before the client's leave (command %d)", nextAt, leaveAt)
			}
			if !redistest.Within(5*time.Second, func() bool { return tc.holds(t, rs.servers[2], key, l.Token()) }) {
				what, _ := redis.String(rs.servers[2].Do("TYPE", key))
				if what == "hash" {
					fields, _ := redis.Strings(rs.servers[2].Do("HKEYS", key))
					what += fmt.Sprint(fields)
				}
				queue, _ := redis.Strings(rs.servers[2].Do("ZRANGE", layout.QueueKey(key), 0, -1))
				t.Fatalf("master 2 never took the next acquisition's hold: it was refused there (now: key %s, queue %q)", what, queue)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "nothing of the key left on any master", func() bool {
				return rs.exists(t, key) == 0 && rs.exists(t, layout.QueueKey(key)) == 0 && rs.exists(t, layout.QueueDeadlinesKey(key)) == 0
			})
			waitUntil(t, "no round of the client tracked", func() bool {
				n, _, _ := c.Sizes()
				return n == 0
			})
		})
	}
}
