package layout_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/layout"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const timeout = 2 * time.Second

// read runs a Reader for key on c, one pipelined round trip at a time.
func read(t *testing.T, c redis.Conn, key string) layout.State {
	t.Helper()
	r := layout.NewReader(key)
	for trips := 0; ; trips++ {
		cmds := r.Next()
		if cmds == nil {
			break
		}
		if trips == 3 {
			t.Fatal("a fourth round trip")
		}
		for _, cmd := range cmds {
			if err := c.Send(cmd.Name, cmd.Args...); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		replies := make([]any, len(cmds))
		for i := range cmds {
			v, err := redis.ReceiveWithTimeout(c, timeout)
			if re, ok := err.(redis.Error); ok {
				v, err = re, nil
			}
			if err != nil {
				t.Fatal(err)
			}
			replies[i] = v
		}
		if err := r.Feed(replies); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
	}
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
	return r.State()
}

func dial(t *testing.T, s *redistest.Server) redis.Conn {
	t.Helper()
	c, err := redis.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func do(t *testing.T, c redis.Conn, cmd string, args ...any) any {
	t.Helper()
	v, err := c.Do(cmd, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", cmd, args, err)
	}
	return v
}

func run(t *testing.T, c redis.Conn, s *scripts.Script, keysAndArgs ...any) int {
	t.Helper()
	n, err := redis.Int(redigot.Do(s, c, timeout, keysAndArgs...))
	if err != nil {
		t.Fatalf("%s: %v", s.Name(), err)
	}
	return n
}

func ttlNear(got, want time.Duration) bool {
	return got <= want && got > want-5*time.Second
}

// Every kind, written by the library's own scripts on a real master, reads
// back as what the scripts meant: the scripts and the layout agree.
func TestReader_everyKindOnRealRedis(t *testing.T) {
	srv := redistest.StartOne(t)
	c := dial(t, srv)

	t.Run("free", func(t *testing.T) {
		st := read(t, c, "nothing")
		if st.Kind != layout.KindFree || st.Type != "none" || st.TTL != 0 || len(st.Holders) != 0 || st.Fenced || st.QueueLen != 0 {
			t.Fatalf("%+v", st)
		}
	})

	t.Run("lock", func(t *testing.T) {
		do(t, c, "SET", "plain", "tok-1", "PX", 30000)
		st := read(t, c, "plain")
		if st.Kind != layout.KindLock || len(st.Holders) != 1 || st.Holders[0].Token != "tok-1" ||
			st.Holders[0].Mode != layout.ModeExclusive || !ttlNear(st.TTL, 30*time.Second) || st.Holders[0].TTL != st.TTL {
			t.Fatalf("%+v", st)
		}
	})

	t.Run("fenced", func(t *testing.T) {
		key := "fenced"
		if v, err := redis.String(redigot.Do(scripts.FencedAcquire, c, timeout, key, layout.FenceKey(key), "tok-f", 30000)); err != nil || v != "0" {
			t.Fatalf("fenced acquire: %q, %v", v, err)
		}
		if run(t, c, scripts.FenceCommit, key, layout.FenceKey(key), "tok-f", "7") != 1 {
			t.Fatal("commit refused")
		}
		st := read(t, c, key)
		if st.Kind != layout.KindLock || !st.Fenced || st.Fence != 7 || st.Holders[0].Token != "tok-f" {
			t.Fatalf("%+v", st)
		}
	})

	t.Run("fair", func(t *testing.T) {
		key := "fair"
		fair := []any{key, layout.QueueKey(key), layout.QueueDeadlinesKey(key)}
		now := time.Now().UnixMicro()
		if run(t, c, scripts.FairAcquire, append(fair, "tok-a", 30000, "waiter-a", now, 20000)...) != 1 {
			t.Fatal("first waiter refused")
		}
		if run(t, c, scripts.FairAcquire, append(fair, "tok-b", 30000, "waiter-b", now+1, 20000)...) != 0 {
			t.Fatal("second waiter took a held lock")
		}
		st := read(t, c, key)
		if st.Kind != layout.KindLock || st.Holders[0].Token != "tok-a" || st.QueueLen != 2 || len(st.Queue) != 2 {
			t.Fatalf("%+v", st)
		}
		for i, w := range []string{"waiter-a", "waiter-b"} {
			if q := st.Queue[i]; q.ID != w || q.Arrival != now+int64(i) || !ttlNear(q.TTL, 20*time.Second) {
				t.Fatalf("queue[%d] = %+v", i, q)
			}
		}
	})

	t.Run("reentrant", func(t *testing.T) {
		for i := 1; i <= 2; i++ {
			if run(t, c, scripts.Reentrant, "nested", "acquire", "owner-1", 30000, i, "hold-1") != 1 {
				t.Fatal("hold refused")
			}
		}
		st := read(t, c, "nested")
		if st.Kind != layout.KindReentrant || len(st.Holders) != 1 {
			t.Fatalf("%+v", st)
		}
		if h := st.Holders[0]; h.Mode != layout.ModeReentrant || h.Token != "owner-1" || h.Count != 2 || !ttlNear(h.TTL, 30*time.Second) {
			t.Fatalf("%+v", h)
		}
	})

	t.Run("readers and an intent", func(t *testing.T) {
		key := "doc"
		if run(t, c, scripts.RW, key, "read", "r2", 30000) != 1 || run(t, c, scripts.RW, key, "read", "r1", 20000) != 1 {
			t.Fatal("read refused")
		}
		if run(t, c, scripts.RW, key, "write", "w1", 30000, 10000, "writer-1") != 0 {
			t.Fatal("a writer got in beside readers")
		}
		st := read(t, c, key)
		if st.Kind != layout.KindReadWrite || len(st.Holders) != 2 || st.Intent == nil {
			t.Fatalf("%+v", st)
		}
		for i, want := range []struct {
			tok string
			ttl time.Duration
		}{{"r1", 20 * time.Second}, {"r2", 30 * time.Second}} {
			if h := st.Holders[i]; h.Mode != layout.ModeRead || h.Token != want.tok || !ttlNear(h.TTL, want.ttl) {
				t.Fatalf("holder %d: %+v", i, h)
			}
		}
		if st.Intent.Writer != "writer-1" || !ttlNear(st.Intent.TTL, 10*time.Second) {
			t.Fatalf("intent %+v", st.Intent)
		}
	})

	t.Run("writer", func(t *testing.T) {
		if run(t, c, scripts.RW, "table", "write", "w9", 30000, 10000, "writer-9") != 1 {
			t.Fatal("write refused")
		}
		st := read(t, c, "table")
		if st.Kind != layout.KindReadWrite || len(st.Holders) != 1 || st.Intent != nil {
			t.Fatalf("%+v", st)
		}
		if h := st.Holders[0]; h.Mode != layout.ModeWrite || h.Token != "w9" || !ttlNear(h.TTL, 30*time.Second) {
			t.Fatalf("%+v", h)
		}
	})

	t.Run("multi", func(t *testing.T) {
		ks := []any{"m1", "m2"}
		if n, err := redis.Int(redigot.DoKeys(scripts.Multi, c, timeout, 2, append(ks, "acquire", "tok-m", 30000)...)); err != nil || n != 1 {
			t.Fatalf("multi: %d, %v", n, err)
		}
		for _, k := range ks {
			if st := read(t, c, k.(string)); st.Kind != layout.KindLock || st.Holders[0].Token != "tok-m" {
				t.Fatalf("%s: %+v", k, st)
			}
		}
	})

	t.Run("foreign", func(t *testing.T) {
		do(t, c, "RPUSH", "list", "x")
		do(t, c, "HSET", "mixed", "r:x", "1", "owner", "2")
		do(t, c, "HSET", "badcount", "owner", "many")
		do(t, c, "SET", "empty", "")
		for _, k := range []string{"list", "mixed", "badcount", "empty"} {
			if st := read(t, c, k); st.Kind != layout.KindForeign || len(st.Holders) != 0 {
				t.Errorf("%s: %+v", k, st)
			}
		}
		if st := read(t, c, "list"); st.Type != "list" || st.TTL != layout.NoExpiry {
			t.Errorf("list: %+v", st)
		}
	})

	t.Run("expired entries do not count", func(t *testing.T) {
		past := time.Now().Add(-time.Minute).UnixMilli()
		later := time.Now().Add(time.Minute).UnixMilli()
		do(t, c, "HSET", "stale", "r:gone", past, "w:here", later, "intent", "old", "intent:exp", past)
		st := read(t, c, "stale")
		if st.Kind != layout.KindReadWrite || len(st.Holders) != 1 || st.Holders[0].Token != "here" || st.Intent != nil {
			t.Fatalf("%+v", st)
		}
	})

	t.Run("bounded", func(t *testing.T) {
		args := []any{"crowd"}
		for i := 0; i < layout.MaxEntries+500; i++ {
			args = append(args, "r:"+strconv.Itoa(i), time.Now().Add(time.Minute).UnixMilli())
		}
		do(t, c, "HSET", args...)
		st := read(t, c, "crowd")
		if st.Kind != layout.KindReadWrite || !st.Truncated || len(st.Holders) > layout.MaxEntries || len(st.Holders) == 0 {
			t.Fatalf("kind %v, truncated %v, %d holders", st.Kind, st.Truncated, len(st.Holders))
		}
		do(t, c, "SET", "long", strings.Repeat("t", layout.MaxValue+10))
		st = read(t, c, "long")
		if st.Kind != layout.KindLock || !st.Truncated || len(st.Holders[0].Token) != layout.MaxValue {
			t.Fatalf("kind %v, truncated %v, token of %d bytes", st.Kind, st.Truncated, len(st.Holders[0].Token))
		}
	})
}
