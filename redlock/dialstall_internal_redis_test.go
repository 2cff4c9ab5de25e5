package redlock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/pool"
)

// dialTimeout is the error of a dial that ran out of time.
type dialTimeout struct{}

func (dialTimeout) Error() string   { return "dial tcp: i/o timeout" }
func (dialTimeout) Timeout() bool   { return true }
func (dialTimeout) Temporary() bool { return true }

// flakyDialer is a real master's pool whose first fails dials (at least
// one) time out after pause, each having first recorded a stall of this
// process over that dial when stall is set: as if the process had been
// stopped while it dialed.
type flakyDialer struct {
	p     *pool.RedisPool
	stall bool
	fails int64
	pause time.Duration
	dials atomic.Int64
	// stalls is the detector the stall is recorded in: the client's.
	stalls *stall.Stalls
}

func (d *flakyDialer) GetContext(ctx context.Context) (redis.Conn, error) {
	return d.p.GetContext(ctx)
}

func (d *flakyDialer) Dial(ctx context.Context) (redis.Conn, error) {
	if d.dials.Add(1) <= max(d.fails, 1) {
		time.Sleep(d.pause) // the subject: a dial stalled this long
		if d.stall {
			now := time.Now()
			d.stalls.Note(now.Add(-20*time.Millisecond), now)
		}
		return nil, dialTimeout{}
	}
	return d.p.Dial(ctx)
}

// A dial that times out while this process stalled is the process's
// doing, not the master's: the mux dials again at once instead of counting
// the master down for the redial delay (which failed every command to it,
// unsent). A dial that times out with no stall still counts it down.
func TestMux_dialThatTimedOutInAStallIsTriedAgain(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	for _, stalled := range []bool{true, false} {
		name := map[bool]string{true: "stalled", false: "not stalled"}[stalled]
		t.Run(name, func(t *testing.T) {
			d := &flakyDialer{p: s.Pool(), stall: stalled}
			t.Cleanup(func() { d.p.Close() })
			c, err := newRedigo([]pool.Pool{d}, WithTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			d.stalls = c.stalls
			defer c.Close()
			ctx := context.Background()
			l, err := c.TryAcquire(ctx, "dialstall:"+name)
			if stalled {
				if err != nil {
					t.Fatalf("a dial that timed out in a stall failed the acquisition: %v", err)
				}
				if n := d.dials.Load(); n != 2 {
					t.Fatalf("%d dials, want 2 (the second at once)", n)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("a dial that timed out with no stall did not fail the acquisition")
			}
			_, err = c.TryAcquire(ctx, "dialstall:"+name+":2")
			if err == nil || !strings.Contains(err.Error(), "its last dial failed") {
				t.Fatalf("right after a dial timed out with no stall: %v, want the master counted down", err)
			}
			var qe *QuorumError
			if !errors.As(err, &qe) {
				t.Fatalf("%T is not a *QuorumError", err)
			}
			if n := d.dials.Load(); n != 1 {
				t.Fatalf("%d dials, want 1", n)
			}
		})
	}
}
