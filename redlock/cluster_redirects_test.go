package redlock_test

// The redigo cluster transport against hostile nodes that
// redirect in a loop, answer TRYAGAIN without end, or send an ASK to a
// node that never answers. What each test shows is in its comment.

import (
	"context"
	"crypto/sha1"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

var hostileNodeSeq atomic.Int64

// closeTestTimeout is the per-master timeout of the tests of Close: Close
// may give the commands in flight one such timeout, not two
// (closeTestBound leaves a generous margin for a loaded machine).
const (
	closeTestTimeout = 5 * time.Second
	closeTestBound   = 7500 * time.Millisecond
)

// clusterNodeAnswer answers INFO with a run_id of its own, SCRIPT LOAD as a node would and every other command
// with reply(slot of its key), counting the lock commands it saw.
func clusterNodeAnswer(seen *atomic.Int64, reply func(slot int) string) hostile.Answer {
	runID := fmt.Sprintf("%x", sha1.Sum([]byte(fmt.Sprint(hostileNodeSeq.Add(1)))))
	return func(w io.Writer, cmd []string, _ <-chan struct{}) error {
		if cmd[0] == "INFO" {
			info := "# Server\r\nrun_id:" + runID + "\r\n"
			_, err := fmt.Fprintf(w, "$%d\r\n%s\r\n", len(info), info)
			return err
		}
		if len(cmd) == 3 && cmd[0] == "SCRIPT" && strings.EqualFold(cmd[1], "LOAD") {
			_, err := fmt.Fprintf(w, "$40\r\n%x\r\n", sha1.Sum([]byte(cmd[2])))
			return err
		}
		if cmd[0] == "ASKING" {
			_, err := io.WriteString(w, "+OK\r\n")
			return err
		}
		slot := 0
		if len(cmd) > 3 && (cmd[0] == "EVALSHA" || cmd[0] == "EVAL") {
			slot = keySlot(cmd[3])
			seen.Add(1)
		} else if len(cmd) > 1 && cmd[0] == "SET" {
			slot = keySlot(cmd[1])
			seen.Add(1)
		}
		_, err := io.WriteString(w, reply(slot))
		return err
	}
}

// Two nodes that redirect to each other without end (MOVED and ASK, A to
// B to A): each command follows a bounded number of redirections, fails
// with an error naming the member and saying the slots keep moving, and
// the Client's Close leaves nothing running.
func TestCluster_redirectLoopIsBounded(t *testing.T) {
	redistest.SkipShort(t)
	for _, kind := range []string{"MOVED", "ASK"} {
		t.Run(kind, func(t *testing.T) {
			var seenA, seenB atomic.Int64
			var addrB atomic.Value
			a := hostile.Start(t, clusterNodeAnswer(&seenA, func(slot int) string {
				return fmt.Sprintf("-%s %d %s\r\n", kind, slot, addrB.Load())
			}))
			b := hostile.Start(t, clusterNodeAnswer(&seenB, func(slot int) string {
				return fmt.Sprintf("-%s %d %s\r\n", kind, slot, a)
			}))
			addrB.Store(b)
			member := "cluster://" + a
			c, err := redigo.NewFromAddrs([]string{member}, redlock.WithTimeout(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			const tries = 5
			for i := 0; i < tries; i++ {
				_, err := c.TryAcquire(ctx, "{loop}:lock")
				if err == nil {
					t.Fatal("a member whose nodes redirect in a loop granted a lock")
				}
				if i == 0 {
					t.Logf("%v", err)
					if !strings.Contains(err.Error(), member) || !strings.Contains(err.Error(), "redirections") {
						t.Errorf("error does not name the member and the redirections: %v", err)
					}
				}
			}
			start := time.Now()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			t.Logf("Close took %v", time.Since(start))
			// Each command: its first try and at most 5 redirections.
			// The commands: an acquisition and its rollback per
			// TryAcquire, the first contact's identity probe, and the
			// retries of rollbacks the member missed (docs/design.md,
			// "Finishing what a master missed"), whose count varies: the
			// bound allows two per TryAcquire.
			total := seenA.Load() + seenB.Load()
			t.Logf("lock commands seen: A %d, B %d", seenA.Load(), seenB.Load())
			if total%6 != 0 {
				t.Logf("%d is not a multiple of 6: a command stopped short of 5 redirections", total)
			}
			if total > (tries*4+1)*6 {
				t.Errorf("%d lock commands for %d TryAcquire calls: the redirections are not bounded", total, tries)
			}
		})
	}
}

// ctxAndCloseHonoured checks, on a client of the one-member cluster whose
// seed is seed, that a TryAcquire of key under a 300ms ctx fails within
// a loose bound while the node's fault (what) goes on, and that Close
// then gives what is in flight at most one per-master timeout.
func ctxAndCloseHonoured(t *testing.T, seed, key, what string) {
	t.Helper()
	c, err := redigo.NewFromAddrs([]string{"cluster://" + seed}, redlock.WithTimeout(closeTestTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.TryAcquire(ctx, key, redlock.WithTTL(30*time.Second))
	took := time.Since(start)
	t.Logf("TryAcquire: %v after %v", err, took)
	if err == nil {
		t.Fatalf("granted despite %s", what)
	}
	if took > 5*time.Second {
		t.Errorf("TryAcquire with a 300ms ctx took %v with %s: ctx ignored", took, what)
	}
	start = time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	took = time.Since(start)
	t.Logf("Close took %v", took)
	if took > closeTestBound {
		t.Errorf("Close took %v with %s under way (the per-master timeout is %v)", took, what, closeTestTimeout)
	}
}

// A node that answers TRYAGAIN for ever: the caller's ctx is honoured,
// and Close while the tries go on gives them at most one per-master
// timeout (as documented), ends them and leaves nothing running.
func TestCluster_tryAgainForeverHonoursCtxAndClose(t *testing.T) {
	redistest.SkipShort(t)
	var seen atomic.Int64
	a := hostile.Start(t, clusterNodeAnswer(&seen, func(int) string { return "-TRYAGAIN Multiple keys request during rehashing of slot\r\n" }))
	ctxAndCloseHonoured(t, a, "{again}:lock", "TRYAGAIN tries")
	n := seen.Load()
	t.Logf("%d tries before Close", n)
	time.Sleep(200 * time.Millisecond) // the subject: no try comes after Close
	if m := seen.Load(); m != n {
		t.Errorf("the node still got tries after Close: %d then %d", n, m)
	}
}

// An ASK to a node that accepts and never answers (as a SIGSTOPped node):
// the caller's ctx is honoured, and Close gives what is in flight at most
// one per-master timeout, as documented: the transport's own Close does
// not wait out the ASK connection's read (it did, so Close took two
// timeouts: one for the Client's workers, one more in the transport).
func TestCluster_askToSilentNode(t *testing.T) {
	redistest.SkipShort(t)
	silent := hostile.Silent(t)
	var seen atomic.Int64
	a := hostile.Start(t, clusterNodeAnswer(&seen, func(slot int) string {
		return fmt.Sprintf("-ASK %d %s\r\n", slot, silent)
	}))
	ctxAndCloseHonoured(t, a, "{ask}:lock", "an ASK to a silent node")
}

// Nodes that echo the member's password (pool.WithAuth applies to every
// node) in their errors: on the seed's lock commands, on a node a MOVED
// names (its AUTH refused), and on the ASK connection's ASKING. No error
// the caller sees quotes the password.
func TestCluster_passwordNeverQuoted(t *testing.T) {
	redistest.SkipShort(t)
	const secret = "S3cretClusterPassw0rd"
	echo := func(seen *atomic.Int64, authReply string, reply func(slot int) string) hostile.Answer {
		inner := clusterNodeAnswer(seen, reply)
		return func(w io.Writer, cmd []string, quit <-chan struct{}) error {
			switch cmd[0] {
			case "AUTH", "HELLO":
				_, err := io.WriteString(w, authReply)
				return err
			case "ASKING":
				_, err := io.WriteString(w, "-ERR ASKING refused for password "+secret+"\r\n")
				return err
			}
			return inner(w, cmd, quit)
		}
	}
	var seenB atomic.Int64
	refuses := hostile.Start(t, echo(&seenB, "-WRONGPASS invalid password "+secret+"\r\n", func(int) string { return "-ERR never\r\n" }))
	asks := hostile.Start(t, echo(&seenB, "+OK\r\n", func(int) string { return "-ERR " + secret + "\r\n" }))
	for name, reply := range map[string]func(int) string{
		"echo":  func(int) string { return "-ERR bad thing " + secret + "\r\n" },
		"moved": func(slot int) string { return fmt.Sprintf("-MOVED %d %s\r\n", slot, refuses) },
		"ask":   func(slot int) string { return fmt.Sprintf("-ASK %d %s\r\n", slot, asks) },
	} {
		t.Run(name, func(t *testing.T) {
			var seen atomic.Int64
			seed := hostile.Start(t, echo(&seen, "+OK\r\n", reply))
			c, err := redigo.NewFromAddrs([]string{"cluster://" + seed}, redlock.WithTimeout(time.Second),
				redigo.WithPoolOptions(pool.WithAuth("", secret)))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = c.TryAcquire(ctx, "{pw}:lock")
			if err == nil {
				t.Fatal("granted")
			}
			t.Logf("%v", err)
			if strings.Contains(fmt.Sprintf("%v %+v %#v", err, err, err), secret) {
				t.Errorf("the error quotes the password: %v", err)
			}
		})
	}
}
