package redlock_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// inspectAll returns what every master holds for key, failing the test on
// any master's error.
func inspectAll(t *testing.T, c *redlock.Client, key string) []layout.State {
	t.Helper()
	return statesOf(t, c, key, c.Inspect)
}

// statesOf returns what inspect read on every master for key, failing the
// test on any master's error.
func statesOf(t *testing.T, c *redlock.Client, key string, inspect func(context.Context, string) (redlock.Inspection, error)) []layout.State {
	t.Helper()
	in, err := inspect(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if in.Key != key || len(in.Masters) != c.Masters() {
		t.Fatalf("inspection of %q: key %q, %d masters", key, in.Key, len(in.Masters))
	}
	sts := make([]layout.State, len(in.Masters))
	for i, m := range in.Masters {
		if m.Err != nil || m.Index != i || m.Addr == "" {
			t.Fatalf("master %d (%s): %v", m.Index, m.Addr, m.Err)
		}
		sts[i] = m.State
	}
	return sts
}

// Every lock kind, taken through the client, shows on every master as the
// layout describes it.
func TestClient_Inspect_everyKind(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		ctx := ctxT(t)

		for _, st := range inspectAll(t, c, "free") {
			if st.Kind != layout.KindFree || st.Fenced || len(st.Holders) != 0 {
				t.Fatalf("free key: %+v", st)
			}
		}

		fenced, err := c.Acquire(ctx, "job", redlock.WithTTL(time.Minute), redlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		defer fenced.Release(ctx)
		fair, err := c.Acquire(ctx, "turns", redlock.WithTTL(time.Minute), redlock.WithFair())
		if err != nil {
			t.Fatal(err)
		}
		defer fair.Release(ctx)
		re, err := c.NewReentrant("nested", "owner-1", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if err := re.Acquire(ctx); err != nil {
				t.Fatal(err)
			}
			defer re.Release(ctx)
		}
		r1, err := c.AcquireRead(ctx, "doc", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer r1.Release(ctx)
		r2, err := c.AcquireRead(ctx, "doc", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer r2.Release(ctx)
		w, err := c.AcquireWrite(ctx, "table", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Release(ctx)
		multi, err := c.AcquireMulti(ctx, []string{"m1", "m2"}, redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer multi.Release(ctx)

		// An acquisition returns at a quorum: a master may get its command a
		// moment later, so each check counts the masters that agree.
		held := func(key string, ok func(layout.State) bool) {
			t.Helper()
			deadline := time.Now().Add(5 * time.Second)
			for {
				n, last := 0, layout.State{}
				for _, st := range inspectAll(t, c, key) {
					if ok(st) {
						n++
					} else {
						last = st
					}
				}
				if n == 3 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %d of 3 masters as expected; one holds %+v", key, n, last)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		minute := func(d time.Duration) bool { return d > 50*time.Second && d <= time.Minute }
		held("job", func(st layout.State) bool {
			return st.Kind == layout.KindLock && len(st.Holders) == 1 && st.Holders[0].Token == fenced.Token() &&
				minute(st.TTL) && st.Fenced && st.Fence == fenced.Fence()
		})
		held("turns", func(st layout.State) bool {
			return st.Kind == layout.KindLock && st.Holders[0].Token == fair.Token() && st.QueueLen == 1 && len(st.Queue) == 1
		})
		held("nested", func(st layout.State) bool {
			return st.Kind == layout.KindReentrant && len(st.Holders) == 1 && st.Holders[0].Token == "owner-1" &&
				st.Holders[0].Count == 2 && minute(st.Holders[0].TTL)
		})
		held("doc", func(st layout.State) bool {
			if st.Kind != layout.KindReadWrite || len(st.Holders) != 2 || st.Intent != nil {
				return false
			}
			toks := map[string]bool{r1.Token(): true, r2.Token(): true}
			for _, h := range st.Holders {
				if h.Mode != layout.ModeRead || !toks[h.Token] || !minute(h.TTL) {
					return false
				}
			}
			return true
		})
		held("table", func(st layout.State) bool {
			return st.Kind == layout.KindReadWrite && len(st.Holders) == 1 && st.Holders[0].Mode == layout.ModeWrite &&
				st.Holders[0].Token == w.Token()
		})
		for _, k := range []string{"m1", "m2"} {
			held(k, func(st layout.State) bool { return st.Kind == layout.KindLock && st.Holders[0].Token == multi.Token() })
		}
	})
}

// A master that is down, one that sends replies of the wrong shape, one
// that never answers and one whose reply makes redigo's parser panic each
// fail on their own, named by address, within the per-master timeout;
// the others are read.
func TestClient_Inspect_failuresNamedByAddress(t *testing.T) {
	rs := startReal(t, 2)
	if _, err := rs.servers[0].Do("SET", "k", "tok", "PX", 60000); err != nil {
		t.Fatal(err)
	}
	down := rs.servers[1].Addr()
	if err := rs.servers[1].Kill(); err != nil {
		t.Fatal(err)
	}
	garbage := hostile.Start(t, func(w io.Writer, cmd []string, _ <-chan struct{}) error {
		reply := "$9\r\n\x1b[31mred!\r\n" // a bulk string to every command, TIME and TYPE included
		if cmd[0] == "PING" {
			reply = "+PONG\r\n"
		}
		_, err := io.WriteString(w, reply)
		return err
	})
	silent := hostile.Start(t, func(w io.Writer, cmd []string, quit <-chan struct{}) error {
		<-quit
		return io.EOF
	})
	panicky := hostile.Start(t, hostile.Reply("$300000000000000\r\n"))
	unguarded := &redis.Pool{MaxIdle: 1, DialContext: func(ctx context.Context) (redis.Conn, error) {
		return redis.DialContext(ctx, "tcp", panicky)
	}}
	defer unguarded.Close()
	pools := []pool.Pool{rs.pools[0], rs.pools[1]}
	for _, a := range []string{garbage, silent} {
		p, err := pool.New(a)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pools = append(pools, p)
	}
	pools = append(pools, unguarded)
	const timeout = 300 * time.Millisecond
	c, err := redigo.New(pools, redlock.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	start := time.Now()
	in, err := c.Inspect(ctxT(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*timeout+time.Second {
		t.Errorf("Inspect took %v with a master that never answers (timeout %v)", took, timeout)
	}
	if m := in.Masters[0]; m.Err != nil || m.State.Kind != layout.KindLock || m.State.Holders[0].Token != "tok" {
		t.Fatalf("healthy master: %+v", m)
	}
	for i, want := range []struct {
		addr string
		is   error
	}{1: {down, nil}, 2: {garbage, layout.ErrMalformed}, 3: {silent, redlock.ErrMasterTimeout}, 4: {"master-4", redlock.ErrPanic}} {
		if i == 0 {
			continue
		}
		m := in.Masters[i]
		var ne *redlock.NodeError
		if !errors.As(m.Err, &ne) || ne.Index != i || ne.Addr != want.addr || m.Addr != want.addr ||
			!strings.Contains(m.Err.Error(), want.addr) {
			t.Errorf("master %d: %v, want a *NodeError naming %s", i, m.Err, want.addr)
		}
		if want.is != nil && !errors.Is(m.Err, want.is) {
			t.Errorf("master %d: %v, want %v", i, m.Err, want.is)
		}
		if strings.Contains(m.Err.Error(), "\x1b") {
			t.Errorf("master %d: the error carries the master's bytes: %q", i, m.Err)
		}
		if m.State.Kind != layout.KindFree || m.State.Holders != nil {
			t.Errorf("master %d: a state beside its error: %+v", i, m.State)
		}
	}
}

func TestClient_Inspect_invalidAndCancelled(t *testing.T) {
	rs := startReal(t, 1)
	c := rs.client(t, pipelinedPath)
	var nilCtx context.Context
	if _, err := c.Inspect(nilCtx, "k"); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("nil ctx: %v", err)
	}
	if _, err := c.Inspect(ctxT(t), ""); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("empty key: %v", err)
	}
	var zero redlock.Client
	if _, err := zero.Inspect(ctxT(t), "k"); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("zero Client: %v", err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	in, err := c.Inspect(ctx, "k")
	if err != nil || !errors.Is(in.Masters[0].Err, context.Canceled) {
		t.Errorf("cancelled ctx: %v, master: %v", err, in.Masters[0].Err)
	}
}
