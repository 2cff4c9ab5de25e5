package redlock_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// dumpKeys describes every key on master s but the warm-up's: its type,
// PTTL and contents, sorted.
func dumpKeys(t *testing.T, s *redistest.Server) string {
	t.Helper()
	keys, err := redis.Strings(s.Do("KEYS", "*"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		if strings.Contains(k, "warm") {
			continue
		}
		typ, _ := redis.String(s.Do("TYPE", k))
		pttl, _ := redis.Int64(s.Do("PTTL", k))
		var v any
		switch typ {
		case "string":
			v, _ = redis.String(s.Do("GET", k))
		case "hash":
			v, _ = redis.StringMap(s.Do("HGETALL", k))
		case "zset":
			v, _ = redis.Strings(s.Do("ZRANGE", k, 0, -1, "WITHSCORES"))
		}
		out = append(out, fmt.Sprintf("%s (%s, PTTL %d ms): %v", k, typ, pttl, v))
	}
	return strings.Join(out, "; ")
}

// TestConfirm_everyKindTakesBackOnlyTheLateGrant: each lock kind's failed attempt whose
// acquisition was held unanswered and runs late, right after its
// rollback found nothing there (the harmful order, every time). The
// confirming rollback (its kind's own script) must take the late grant
// back — and only it: another reader's entry stays, as do the companion
// keys a kind keeps (a fence counter). What else the late acquisition
// left (a fair waiter's queue entry, a writer's intent) is checked too:
// the waiter gave up, so it must not stay to hold others back. One
// master behind a proxy; pooled path (the pipelined path's only
// difference, a connection broken at its stall bound, is covered by
// TestConfirm_reentrantSparesNextHold).
func TestConfirm_everyKindTakesBackOnlyTheLateGrant(t *testing.T) {
	redistest.SkipShort(t)
	type setup struct {
		name  string
		keys  func(key string) []string // the keys the attempt writes (the first is the lock's)
		other func(t *testing.T, c *redlock.Client, key string)
		try   func(c *redlock.Client, key string) error
		// leftover checks what stays on the master (dumpKeys's text) once
		// the confirmation ran.
		leftover func(dump, key string) error
		// residue, when set: what the late acquisition left besides its
		// grant (a fair waiter's queue entry, a writer's intent) is not
		// taken back by the rollback, which deletes the grant only; it
		// must end within its own short TTL (entryTTL: 4 backoffMax + 2
		// timeouts), which residue probes: another holder gets the lock
		// (nil) or not yet.
		residue func(c *redlock.Client, key string) error
	}
	one := func(key string) []string { return []string{key} }
	nothing := func(dump, key string) error {
		if dump != "" {
			return fmt.Errorf("left: %s", dump)
		}
		return nil
	}
	ttl := redlock.WithTTL(time.Minute)
	for _, k := range []setup{
		{name: "plain", keys: one, try: func(c *redlock.Client, key string) error {
			_, err := c.TryAcquire(context.Background(), key, ttl)
			return err
		}, leftover: nothing},
		{name: "fenced", keys: one, try: func(c *redlock.Client, key string) error {
			_, err := c.TryAcquire(context.Background(), key, ttl, redlock.WithFencing())
			return err
		}, leftover: func(dump, key string) error {
			// A fence counter may stay (it only ever grows); nothing else.
			for _, d := range strings.Split(dump, "; ") {
				if d != "" && !strings.Contains(d, "fence") {
					return fmt.Errorf("left: %s (want no more than a fence counter)", dump)
				}
			}
			return nil
		}},
		{name: "meta", keys: one, try: func(c *redlock.Client, key string) error {
			_, err := c.TryAcquire(context.Background(), key, ttl, redlock.WithMetadata("m28"))
			return err
		}, leftover: nothing},
		{name: "multi", keys: func(key string) []string { return []string{key, key + ":b"} }, try: func(c *redlock.Client, key string) error {
			_, err := c.TryAcquireMulti(context.Background(), []string{key, key + ":b"}, ttl)
			return err
		}, leftover: nothing},
		{name: "fair", keys: one, try: func(c *redlock.Client, key string) error {
			_, err := c.TryAcquire(context.Background(), key, ttl, redlock.WithFair())
			return err
		}, leftover: nothing, residue: func(c *redlock.Client, key string) error {
			l, err := c.TryAcquire(context.Background(), key, redlock.WithFair())
			if err == nil {
				err = l.Release(context.Background())
			}
			return err
		}},
		{name: "read", keys: one, other: func(t *testing.T, c *redlock.Client, key string) {
			if _, err := c.TryAcquireRead(context.Background(), key, ttl); err != nil {
				t.Fatal(err)
			}
		}, try: func(c *redlock.Client, key string) error {
			_, err := c.TryAcquireRead(context.Background(), key, ttl)
			return err
		}, leftover: func(dump, key string) error {
			// The other reader's entry alone.
			if strings.Count(dump, "r:") != 1 {
				return fmt.Errorf("left: %s (want the other reader's entry alone)", dump)
			}
			return nil
		}},
		{name: "write", keys: one, try: func(c *redlock.Client, key string) error {
			_, err := c.TryAcquireWrite(context.Background(), key, ttl)
			return err
		}, leftover: nothing},
		{name: "writeBehindReader", keys: one, other: func(t *testing.T, c *redlock.Client, key string) {
			if _, err := c.TryAcquireRead(context.Background(), key, ttl); err != nil {
				t.Fatal(err)
			}
		}, try: func(c *redlock.Client, key string) error {
			_, err := c.TryAcquireWrite(context.Background(), key, ttl)
			return err
		}, leftover: func(dump, key string) error {
			if strings.Count(dump, "r:") != 1 || strings.Contains(dump, "intent") || strings.Contains(dump, "w:") {
				return fmt.Errorf("left: %s (want the reader's entry alone: the writer gave up)", dump)
			}
			return nil
		}, residue: func(c *redlock.Client, key string) error {
			l, err := c.TryAcquireRead(context.Background(), key)
			if err == nil {
				err = l.Release(context.Background())
			}
			return err
		}},
	} {
		t.Run(k.name, func(t *testing.T) {
			s := redistest.StartOne(t)
			key := "cf:kinds:" + k.name
			ks := k.keys(key)
			onKey := func(cmd []string) bool {
				switch cmd[0] {
				case "SET":
					return len(cmd) > 1 && cmd[1] == key
				case "EVALSHA", "EVAL":
					return len(cmd) > 3 && cmd[3] == key
				}
				return false
			}
			isRollback := func(cmd []string) bool {
				if cmd[4] == "read" || cmd[4] == "write" {
					return false // a read-write acquisition (its last value may be "")
				}
				for _, a := range cmd[4:] {
					if a == "" {
						return true
					}
				}
				return false
			}
			var acquisitions, rollbacks atomic.Int32
			setRun := make(chan struct{})  // the held acquisition may run
			lateRan := make(chan struct{}) // it has
			var late string
			var mu sync.Mutex
			hook := func(c *hostile.Conn, cmd []string) hostile.Verdict {
				if !onKey(cmd) {
					return hostile.Forward
				}
				if !isRollback(cmd) {
					if acquisitions.Add(1) != 1 {
						return hostile.Forward
					}
					select {
					case <-setRun:
					case <-c.Quit():
						return hostile.HangUp
					}
					v, err := s.Run(cmd)
					mu.Lock()
					late = fmt.Sprintf("%v, %v", v, err)
					mu.Unlock()
					close(lateRan)
					return hostile.HangUp
				}
				if rollbacks.Add(1) == 1 {
					before := scriptsRun(s)
					afterScriptRuns(s, before, c.Quit(), func() { close(setRun) })
					return hostile.Forward
				}
				select { // a later rollback runs after the late acquisition
				case <-lateRan:
				case <-c.Quit():
					return hostile.HangUp
				}
				return hostile.Forward
			}
			p := hostile.NewProxy(t, s.Addr(), hook)
			c, err := redigo.NewFromAddrs([]string{p.Addr()}, redlock.WithTimeout(confirmTimeout), redigo.WithPipelining(false))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// The test's own client: its holders (the other reader) and
			// probes are not the subject, and wait as long as a busy host
			// needs.
			direct, err := redigo.NewFromAddrs([]string{s.Addr()}, redlock.WithTimeout(realTimeout))
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			// Load every script the attempt and its rollback use, on
			// keys of their own.
			for _, warm := range []string{key + ":warm1", key + ":warm2"} {
				l, err := c.Acquire(context.Background(), warm, redlock.WithWait(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if err := k.try(c, key+":warm3"); err != nil {
				t.Fatal(err)
			}
			if k.other != nil {
				k.other(t, direct, key)
			}
			if err := k.try(c, key); err == nil {
				t.Fatal("granted by a master whose acquisition was held")
			}
			select {
			case <-lateRan:
			case <-time.After(5 * time.Second):
				t.Fatalf("the held acquisition never ran (%d rollbacks)", rollbacks.Load())
			}
			// The confirmation (a second rollback, due 20 ms after the
			// first one's answer) is answered, and the rest of the
			// attempt (a leave) has ended.
			if !redistest.Within(10*time.Second, func() bool {
				releasing, _, _ := c.Sizes()
				return rollbacks.Load() >= 2 && redlock.Finishing(c) == 0 && releasing == 0
			}) {
				releasing, _, _ := c.Sizes()
				t.Errorf("not within 10s: %d rollbacks, %d retries pending, %d rounds running", rollbacks.Load(), redlock.Finishing(c), releasing)
			}
			dump := dumpKeys(t, s)
			mu.Lock()
			t.Logf("late acquisition: %s; %d rollbacks; keys %v; on the master: %s", late, rollbacks.Load(), ks, dump)
			mu.Unlock()
			err = k.leftover(dump, key)
			if err == nil {
				return
			}
			if k.residue == nil {
				t.Fatal(err)
			}
			// Its grant must be gone now; the rest within its TTL.
			if strings.Contains(dump, "w:") || strings.Contains(dump, key+" (string") {
				t.Fatalf("the late grant stays: %s", dump)
			}
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var last error
			if !redistest.WaitFor(ctx, func() bool { last = k.residue(direct, key); return last == nil }) {
				t.Fatalf("another holder is still turned away (%v): %s", last, dumpKeys(t, s))
			}
			t.Logf("another holder got the lock %v later (%v)", time.Since(start).Round(time.Millisecond), err)
		})
	}
}
