package scripts_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// previousMulti runs the previous version's wrapped multi.lua on every
// master, as a client of that version does (the lock keys, the first
// key's metadata hash); it returns each master's reply.
func previousMulti(t *testing.T, servers []*redistest.Server, keys []string, op, tok, third, what, meta string) []int {
	t.Helper()
	out := make([]int, len(servers))
	for i, s := range servers {
		c, err := redis.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		args := make([]any, 0, len(keys)+7)
		for _, k := range keys {
			args = append(args, k)
		}
		args = append(args, layout.MetaKey(keys[0]), op, tok, third, what, tok, meta)
		out[i], err = redis.Int(redigot.DoKeys(scripts.PreviousMultiWithMeta, c, timeout, len(keys)+1, args...))
		c.Close()
		if err != nil {
			t.Fatalf("master %d: %s %v: %v", i, op, keys, err)
		}
	}
	return out
}

// allKeysGone waits until no master holds any key, then fails t for
// those still there.
func allKeysGone(t *testing.T, servers []*redistest.Server) {
	t.Helper()
	left := func() []string {
		var ks []string
		for _, s := range servers {
			k, err := redis.Strings(s.Do("KEYS", "*"))
			if err != nil {
				t.Fatal(err)
			}
			ks = append(ks, k...)
		}
		return ks
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	redistest.WaitFor(ctx, func() bool { return len(left()) == 0 })
	if ks := left(); len(ks) != 0 {
		t.Errorf("left on the masters: %q", ks)
	}
}

// holderMeta returns, per master, the metadata Inspect shows for tok at
// key ("-" when tok is not a holder there).
func holderMeta(t *testing.T, c *redlock.Client, key, tok string) []string {
	t.Helper()
	in, err := c.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(in.Masters))
	for i, m := range in.Masters {
		out[i] = "-"
		if m.Err != nil {
			t.Fatalf("master %d: %v", i, m.Err)
		}
		for _, h := range m.State.Holders {
			if h.Token == tok {
				out[i] = h.Meta
			}
		}
	}
	return out
}

func each(vals []string, want string) bool {
	for _, v := range vals {
		if v != want {
			return false
		}
	}
	return true
}

// A client of the previous version (one metadata hash, the first key's)
// and a client of this one (a hash per key), on three masters and the
// same keys, during a rolling upgrade: each one's multi-key lock keeps the
// other out, also of a plain lock on one of its keys; Inspect by the new
// client names the holder on every key (with its metadata where its
// version wrote it); and whichever held, once it released, nothing is left
// on any master, the other's refused attempts included.
func TestMultiWithMeta_previousVersionClientBesideThisOne(t *testing.T) {
	servers := redistest.Start(t, 3)
	ps := make([]pool.Pool, len(servers))
	for i, s := range servers {
		ps[i] = s.Pool()
	}
	c, err := redigo.New(ps, redlock.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ab, bc := []string{"{u}:a", "{u}:b"}, []string{"{u}:b", "{u}:c"}

	t.Run("previous version holds", func(t *testing.T) {
		for i, r := range previousMulti(t, servers, ab, "acquire", "old", "30000", scripts.MetaSet, "host=old") {
			if r != 1 {
				t.Fatalf("master %d refused the previous version's lock", i)
			}
		}
		if l, err := c.TryAcquireMulti(ctx, bc, redlock.WithMetadata("host=new")); !errors.Is(err, redlock.ErrNotAcquired) {
			if err == nil {
				l.Release(ctx)
			}
			t.Fatalf("this version's multi-key lock on a held key: %v", err)
		}
		if l, err := c.TryAcquire(ctx, "{u}:a", redlock.WithMetadata("host=new")); !errors.Is(err, redlock.ErrNotAcquired) {
			if err == nil {
				l.Release(ctx)
			}
			t.Fatalf("this version's plain lock on a held key: %v", err)
		}
		if got := holderMeta(t, c, "{u}:a", "old"); !each(got, "host=old") {
			t.Errorf("Inspect of the first key: %q", got)
		}
		if got := holderMeta(t, c, "{u}:b", "old"); !each(got, "") {
			t.Errorf("Inspect of the second key (no metadata in the previous version): %q", got)
		}
		// The refused attempts are done on every master before the release.
		ctx2, cancel2 := context.WithTimeout(ctx, 5*time.Second)
		defer cancel2()
		redistest.WaitFor(ctx2, func() bool {
			for _, s := range servers {
				if n, _ := redis.Int(s.Do("EXISTS", "{u}:c", layout.MetaKey("{u}:c"), layout.MetaKey("{u}:b"))); n != 0 {
					return false
				}
			}
			return true
		})
		for i, r := range previousMulti(t, servers, ab, "release", "old", "", scripts.MetaDrop, "") {
			if r != 1 {
				t.Errorf("master %d: the previous version's release: %d", i, r)
			}
		}
		allKeysGone(t, servers)
	})

	t.Run("this version holds", func(t *testing.T) {
		l, err := c.AcquireMulti(ctx, ab, redlock.WithTTL(30*time.Second), redlock.WithMetadata("host=new"))
		if err != nil {
			t.Fatal(err)
		}
		tok := l.Token()
		ctx2, cancel2 := context.WithTimeout(ctx, 5*time.Second)
		defer cancel2()
		redistest.WaitFor(ctx2, func() bool { return each(holderMeta(t, c, "{u}:b", tok), "host=new") })
		for _, ks := range [][]string{bc, {"{u}:c", "{u}:a"}, ab} {
			for i, r := range previousMulti(t, servers, ks, "acquire", "old", "30000", scripts.MetaSet, "host=old") {
				if r != 0 {
					t.Fatalf("master %d granted the previous version %v, held by this one", i, ks)
				}
			}
			previousMulti(t, servers, ks, "release", "old", "", scripts.MetaDrop, "")
		}
		for _, k := range ab {
			if got := holderMeta(t, c, k, tok); !each(got, "host=new") {
				t.Errorf("Inspect of %s after the previous version's attempts: %q", k, got)
			}
			for i, s := range servers {
				ttl, err := redis.Int64(s.Do("PTTL", layout.MetaKey(k)))
				if err != nil || ttl < 20000 {
					t.Errorf("master %d: the metadata TTL of %s: %d, %v", i, k, ttl, err)
				}
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		allKeysGone(t, servers)
	})
}

// The plain lock's waiting attempts send wait_acquire.lua where the
// previous version sent SET NX PX on every attempt. During a rolling
// upgrade both run on one key: each keeps the other out while it holds,
// the new client's refusal reads the previous holder's TTL (which the
// previous version set), and a key the previous version released or let
// expire is taken by the new one, and the other way round.
func TestWaitAcquire_previousVersionsSetBesideIt(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	previousAcquire := func(tok string, ttl int) any { // the previous version's every attempt
		v, err := c.Do("SET", "k", tok, "NX", "PX", ttl)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	release := func(tok string) {
		if n, err := redis.Int(redigot.Do(scripts.Release, c, timeout, "k", tok, "ch")); err != nil || n != 1 {
			t.Fatalf("release of %s = %d, %v", tok, n, err)
		}
	}
	if v := previousAcquire("old", 5000); v != "OK" {
		t.Fatalf("the previous version on a free key: %#v", v)
	}
	left, err := redis.Int64(redigot.Do(scripts.WaitAcquire, c, timeout, "k", "new", 5000))
	if err != nil || left <= 0 || left > 5000 {
		t.Fatalf("this version beside the previous holder = %d, %v", left, err)
	}
	release("old")
	if v, err := redigot.Do(scripts.WaitAcquire, c, timeout, "k", "new", 5000); err != nil || v != "OK" {
		t.Fatalf("this version after the previous one released = %#v, %v", v, err)
	}
	if v := previousAcquire("old", 5000); v != nil {
		t.Fatalf("the previous version beside this version's holder: %#v", v)
	}
	release("new")
	// A previous holder that vanished: its key runs out, and the refusal
	// said when.
	if v := previousAcquire("old", 50); v != "OK" {
		t.Fatalf("the previous version, short TTL: %#v", v)
	}
	left, err = redis.Int64(redigot.Do(scripts.WaitAcquire, c, timeout, "k", "new", 5000))
	if err != nil || left < 0 || left > 50 {
		t.Fatalf("beside a short hold = %d, %v", left, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	redistest.WaitFor(ctx, func() bool {
		v, _ := redigot.Do(scripts.WaitAcquire, c, timeout, "k", "new", 5000)
		return v == "OK"
	})
	if v, _ := redis.String(c.Do("GET", "k")); v != "new" {
		t.Fatalf("after the previous holder's TTL: GET = %q, want new", v)
	}
}
