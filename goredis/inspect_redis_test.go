package goredis

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// Client.Inspect through go-redis reads what the redigo path reads, for
// every lock kind and a hash too big to read whole (HSCAN), over RESP3
// (go-redis's default: maps, doubles and nested pairs) and RESP2; the
// go-redis hooks see the inspection's commands.
func TestTransport_Inspect_readsWhatRedigoReads(t *testing.T) {
	for _, proto := range []int{3, 2} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ms := startMasters(t, 3)
			clients := make([]redis.UniversalClient, len(ms.servers))
			hooks := make([]*counter, len(ms.servers))
			addrs := make([]string, len(ms.servers))
			for i, s := range ms.servers {
				c := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: proto})
				hooks[i] = &counter{n: make(map[string]int)}
				c.AddHook(hooks[i])
				t.Cleanup(func() { c.Close() })
				clients[i], addrs[i] = c, s.addr
			}
			gc, err := New(clients, redlock.WithTimeout(lockTimeout))
			if err != nil {
				t.Fatal(err)
			}
			defer gc.Close()
			rc, err := redigo.NewFromAddrs(addrs, redlock.WithTimeout(lockTimeout))
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			ctx := ctxFor(t)
			var release []func(context.Context) error
			defer func() {
				for _, r := range release {
					_ = r(ctx)
				}
			}()
			keep := func(l *redlock.Lock, err error) *redlock.Lock {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
				release = append(release, l.Release)
				return l
			}
			keep(gc.Acquire(ctx, "job", redlock.WithTTL(time.Minute), redlock.WithFencing()))
			keep(gc.Acquire(ctx, "turns", redlock.WithTTL(time.Minute), redlock.WithFair()))
			// A fair waiter that gives up later: a queue of two.
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, _ = rc.Acquire(wctx, "turns", redlock.WithFair(), redlock.WithWait(200*time.Millisecond))
			cancel()
			re, err := gc.NewReentrant("nested", "owner-1", redlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				if err := re.Acquire(ctx); err != nil {
					t.Fatal(err)
				}
				release = append(release, re.Release)
			}
			keep(gc.AcquireRead(ctx, "doc", redlock.WithTTL(time.Minute)))
			keep(gc.AcquireRead(ctx, "doc", redlock.WithTTL(time.Minute)))
			keep(gc.AcquireWrite(ctx, "table", redlock.WithTTL(time.Minute)))
			for _, a := range ms.admin {
				fields := make([]any, 0, 2*(layout.MaxEntries+10))
				for f := 0; f < layout.MaxEntries+10; f++ {
					fields = append(fields, fmt.Sprintf("f%d", f), "v")
				}
				if err := a.HSet(ctx, "bighash", fields...).Err(); err != nil {
					t.Fatal(err)
				}
				if err := a.Set(ctx, "text", "not a lock", 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for _, key := range []string{"free", "job", "turns", "nested", "doc", "table", "bighash", "text"} {
				var got, want []layout.State
				// Acquisitions return at a quorum: the last master may
				// follow a moment later; both must agree once it has.
				waitFor(t, key+": go-redis reads what redigo reads", func() bool {
					got, want = inspect(t, gc, key), inspect(t, rc, key)
					return reflect.DeepEqual(got, want)
				})
				// Held on a quorum: a master whose leg of the acquisition
				// timed out on a busy machine holds nothing.
				if held := len(got) - countFree(got); key != "free" && held < len(got)/2+1 {
					t.Errorf("%s: read as held on %d of %d masters", key, held, len(got))
				}
			}
			if st := firstHeld(inspect(t, gc, "turns")); st.QueueLen < 1 || len(st.Queue) == 0 || st.Queue[0].Arrival == 0 {
				t.Errorf("turns: queue %+v (len %d)", st.Queue, st.QueueLen)
			}
			if st := inspect(t, gc, "bighash")[0]; st.Kind != layout.KindForeign {
				t.Errorf("bighash: %+v", st.Kind)
			}
			for i, h := range hooks {
				if h.get("time") == 0 || h.get("type") == 0 {
					t.Errorf("master %d: the hooks saw no inspection (TIME %d, TYPE %d)", i, h.get("time"), h.get("type"))
				}
			}
		})
	}
}

// inspect returns what each master holds for key, with the durations
// rounded to seconds (two reads are never the same millisecond).
func inspect(t *testing.T, c *redlock.Client, key string) []layout.State {
	t.Helper()
	in, err := c.Inspect(ctxFor(t), key)
	if err != nil {
		t.Fatal(err)
	}
	sts := make([]layout.State, len(in.Masters))
	for i, m := range in.Masters {
		if m.Err != nil {
			t.Fatalf("%s: master %d (%s): %v", key, i, m.Addr, m.Err)
		}
		st := m.State
		round := func(d time.Duration) time.Duration {
			if d <= 0 {
				return d
			}
			return d.Round(5 * time.Second)
		}
		st.TTL = round(st.TTL)
		for j := range st.Holders {
			st.Holders[j].TTL = round(st.Holders[j].TTL)
		}
		for j := range st.Queue {
			st.Queue[j].TTL = round(st.Queue[j].TTL)
		}
		if st.Intent != nil {
			st.Intent.TTL = round(st.Intent.TTL)
		}
		sts[i] = st
	}
	return sts
}

// A master that does not answer within the inspection's deadline fails
// there, as ErrMasterTimeout, also on a go-redis client whose own timeouts
// are long; a closed transport refuses at once.
func TestTransport_Inspect_boundedByCtx(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s, func(o *redis.Options) { o.ReadTimeout = 10 * time.Second })
	tr := NewTransport(c)
	if err := c.Do(context.Background(), "CLIENT", "PAUSE", 1000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	_, err := tr.Inspect(ctx, []layout.Command{{Name: "TIME"}})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Inspect on a paused master: %v, want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Errorf("Inspect with a 100ms deadline returned after %v", el)
	}
	if err := tr.Close(); err != nil { // waits for the abandoned round trip
		t.Fatal(err)
	}
	if _, err := tr.Inspect(context.Background(), []layout.Command{{Name: "TIME"}}); !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("Inspect after Close: %v, want ErrClosed", err)
	}
}

// countFree returns how many of states read as free.
func countFree(states []layout.State) int {
	n := 0
	for _, st := range states {
		if st.Kind == layout.KindFree {
			n++
		}
	}
	return n
}

// firstHeld returns the first of states not read as free (the first when
// all are).
func firstHeld(states []layout.State) layout.State {
	for _, st := range states {
		if st.Kind != layout.KindFree {
			return st
		}
	}
	return states[0]
}
