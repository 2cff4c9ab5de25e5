package redlock_test

import (
	"context"
	"fmt"
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

// confirmTimeout is the per-master timeout of these tests' clients; the
// pipelined path breaks a connection after max(10 of them, 1 s). Calls
// that must succeed (the warm-ups) have no more than this, a bound with
// little slack: the confirm tests run their cases one after another
// (docs/testing.md, "What runs at once").
const confirmTimeout = 100 * time.Millisecond

// heldFor is how long a held acquisition waits in the proxy before it is
// dropped unrun: past the pooled timeout and the pipelined stall bound.
const heldFor = 1500 * time.Millisecond

// scriptOfCommand reports whether cmd is a script (EVALSHA or EVAL) on key,
// and returns its op (its first value).
func scriptOfCommand(cmd []string, key string) (string, bool) {
	if (cmd[0] != "EVALSHA" && cmd[0] != "EVAL") || len(cmd) < 5 || cmd[3] != key {
		return "", false
	}
	return cmd[4], true
}

// holdReply waits d, or until the test ends, and drops the command unrun.
func holdReply(c *hostile.Conn, d time.Duration) hostile.Verdict {
	select {
	case <-time.After(d):
	case <-c.Quit():
	}
	return hostile.HangUp
}

// scriptsRun is how many scripts master s has run, or -1 when it cannot
// tell (unlike scriptCalls, safe in a goroutine that may outlive a test).
func scriptsRun(s *redistest.Server) int {
	conn, err := redis.Dial("tcp", s.Addr(), redis.DialConnectTimeout(time.Second),
		redis.DialReadTimeout(time.Second), redis.DialWriteTimeout(time.Second))
	if err != nil {
		return -1
	}
	defer conn.Close()
	info, err := redis.String(conn.Do("INFO", "commandstats"))
	if err != nil {
		return -1
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"eval", "evalsha"} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
				if end := strings.IndexByte(rest, ','); end >= 0 {
					rest = rest[:end]
				}
				var v int
				fmt.Sscan(rest, &v)
				n += v
			}
		}
	}
	return n
}

// afterScriptRuns calls f once master s ran one script more than before
// (before taken with scriptsRun), unless quit closes first.
func afterScriptRuns(s *redistest.Server, before int, quit <-chan struct{}, f func()) {
	go func() {
		for {
			if n := scriptsRun(s); n > before {
				f()
				return
			}
			select {
			case <-quit:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
}

// TestConfirm_reentrantSparesNextHold: a reentrant owner's first
// attempt fails because its acquisition got no answer (held in a proxy,
// then dropped unrun); its rollback finds nothing, so it is to be
// confirmed 20 ms later. The owner takes the lock again meanwhile — its
// token is the same — and the confirmation (a "release" of the owner with
// count 0) would delete that new hold. The owner's next round supersedes
// the old one: the confirmation must be dropped, or, when it was already
// in flight, the next round must wait for it. Both paths; the next hold
// starts right after the k-th rollback of the failed attempt was
// answered (for k up to the number a lone failed attempt sends: see the
// "alone" case, which also proves the confirmation is sent then), and,
// in "inflight", while the confirmation itself is held in the proxy.
func TestConfirm_reentrantSparesNextHold(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		// alone: how many rollbacks a lone failed attempt sends, and what
		// they answer. The last is the confirmation.
		alone := reentrantConfirmCase(t, path, "alone", 0, false)
		if n := len(alone); n < 2 || alone[n-1] != "0" || alone[n-2] != "0" {
			t.Fatalf("a lone failed attempt sent rollbacks answered %v: want at least two, the last two finding nothing (the confirmation after one that found nothing)", alone)
		}
		for k := 1; k < len(alone); k++ {
			reentrantConfirmCase(t, path, fmt.Sprintf("after%d", k), k, false)
		}
		reentrantConfirmCase(t, path, "inflight", len(alone), true)
	})
}

// reentrantConfirmCase runs one case of TestConfirm_reentrantSparesNextHold:
// the owner's next hold starts after the startAfter-th rollback was
// answered (0: never), or, with inflight, once the startAfter-th rollback
// reached the proxy, which holds it 80 ms before it runs. It returns the
// answers of the rollbacks ("release" with count 0) seen before the next
// hold was released.
func reentrantConfirmCase(t *testing.T, path connPath, name string, startAfter int, inflight bool) []string {
	var answers []string
	t.Run(name, func(t *testing.T) {
		s := redistest.StartOne(t)
		key := "cf:re:" + path.name + ":" + name
		var acquires, releases atomic.Int32
		var mu sync.Mutex
		var seen []string // the rollbacks' answers, in order
		start := make(chan struct{})
		var startOnce sync.Once
		startNext := func() { startOnce.Do(func() { close(start) }) }
		hook := func(c *hostile.Conn, cmd []string) hostile.Verdict {
			op, ok := scriptOfCommand(cmd, key)
			if !ok {
				return hostile.Forward
			}
			switch {
			case op == "acquire" && acquires.Add(1) == 1:
				return holdReply(c, heldFor)
			case op == "release" && len(cmd) > 7 && cmd[6] == "0" && cmd[7] == "":
				// A rollback (a release announces itself on a channel).
				n := int(releases.Add(1))
				if inflight && n == startAfter {
					startNext() // the next hold starts while this one waits
					select {
					case <-time.After(80 * time.Millisecond):
					case <-c.Quit():
						return hostile.HangUp
					}
				}
				before := scriptsRun(s)
				v, _ := redis.Int(s.Do("EXISTS", key))
				afterScriptRuns(s, before, c.Quit(), func() {
					mu.Lock()
					seen = append(seen, fmt.Sprintf("%d", v))
					mu.Unlock()
					if !inflight && n == startAfter {
						startNext()
					}
				})
			}
			return hostile.Forward
		}
		re := failedFirstHold(t, hostile.NewProxy(t, s.Addr(), hook).Addr(), key, "owner-28", path)
		if startAfter == 0 {
			// Alone: every rollback and the confirmation go out.
			time.Sleep(heldFor + 500*time.Millisecond) // the subject: past the held acquisition and its confirmation's due time
			mu.Lock()
			answers = append([]string(nil), seen...)
			mu.Unlock()
			t.Logf("rollbacks of a lone failed attempt (key present before each): %v", answers)
			return
		}
		select {
		case <-start:
		case <-time.After(5 * time.Second):
			t.Fatalf("the %d-th rollback never came (%d came)", startAfter, releases.Load())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := re.Acquire(ctx); err != nil {
			t.Fatalf("the owner's next hold: %v", err)
		}
		// Past every retry and confirmation of the failed attempt (the
		// held acquisition is dropped unrun at heldFor).
		time.Sleep(heldFor + 300*time.Millisecond) // the subject: past every retry and confirmation of the failed attempt
		n, err := redis.Int(s.Do("EXISTS", key))
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := append([]string(nil), seen...)
		mu.Unlock()
		if n != 1 {
			t.Fatalf("the owner's next hold was deleted on the master while held (rollbacks sent: %d; key present before each: %v)", releases.Load(), got)
		}
		if err := re.Lock().Err(); err != nil {
			t.Fatalf("the next hold reports %v", err)
		}
		if err := re.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !s.WaitAbsent(key, time.Second) {
			t.Fatal("released, the key stays")
		}
		t.Logf("rollbacks (key present before each): %v", strings.Join(got, " "))
	})
	return answers
}

// failedFirstHold makes a Client of the one master behind the proxy
// at addr, on path, with confirmTimeout, closed when t ends, and a
// Reentrant of owner on key (TTL one minute), whose first TryAcquire it
// runs and expects to fail: the proxy holds the acquisition. The Client's
// first contact is made and the reentrant script loaded before (a hold of
// key+":warm" taken and released), so that each rollback is one EVALSHA.
func failedFirstHold(t *testing.T, addr, key, owner string, path connPath) *redlock.Reentrant {
	t.Helper()
	c, err := redigo.NewFromAddrs([]string{addr}, redlock.WithTimeout(confirmTimeout), path.Option())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	warm, err := c.NewReentrant(key+":warm", "warm")
	if err != nil {
		t.Fatal(err)
	}
	// Acquire tries again where the first contact (a dial, the script
	// load) outlasts the per-master timeout on a busy machine; the proxy
	// hooks only key's own commands.
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := warm.Acquire(wctx); err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	re, err := c.NewReentrant(key, owner, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := re.TryAcquire(context.Background()); err == nil {
		t.Fatal("granted by a master whose acquisition was held")
	}
	return re
}
