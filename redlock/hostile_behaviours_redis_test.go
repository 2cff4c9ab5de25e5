package redlock_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// Misbehaviours a master can show without breaking the RESP framing:
// silence, nonsense, a connection that ends mid-reply or is reset, the
// error replies of a master that is loading, busy, a replica or lost its
// own master, and a script cache that never keeps a script. Each one
// master of three costs that master's vote and nothing else, on both
// connection paths: locks are taken, extended and released on the two
// real masters, a waiter is woken, no call waits for the bad master
// beyond the per-master timeout, and nothing is left on the real masters.
// With only two masters the error names the bad one.

// resetAfterRead resets the connection (RST, not FIN) once a command has
// been read.
func resetAfterRead(w io.Writer, _ []string, _ <-chan struct{}) error {
	if tc, ok := w.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	return errors.New("reset")
}

// closeMidReply starts a bulk reply of ten bytes, sends three and hangs up.
func closeMidReply(w io.Writer, _ []string, _ <-chan struct{}) error {
	_, _ = io.WriteString(w, "$10\r\nabc")
	return errors.New("hung up mid-reply")
}

var misbehaviours = []struct {
	name string
	addr func(t *testing.T) string
}{
	{"silence", func(t *testing.T) string { return hostile.Silent(t) }},
	{"a status for every command", func(t *testing.T) string { return hostile.Start(t, hostile.Reply("+PONG\r\n")) }},
	{"bytes that are no reply", func(t *testing.T) string { return hostile.Start(t, hostile.Reply("\x00\xffnonsense\r\n")) }},
	{"an integer for every command", func(t *testing.T) string { return hostile.Start(t, hostile.Reply(":7\r\n")) }},
	{"closed mid-reply", func(t *testing.T) string { return hostile.Start(t, closeMidReply) }},
	{"reset", func(t *testing.T) string { return hostile.Start(t, resetAfterRead) }},
	{"LOADING", func(t *testing.T) string {
		return hostile.Start(t, hostile.Reply("-LOADING Redis is loading the dataset in memory\r\n"))
	}},
	{"BUSY", func(t *testing.T) string {
		return hostile.Start(t, hostile.Reply("-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"))
	}},
	{"MASTERDOWN", func(t *testing.T) string {
		return hostile.Start(t, hostile.Reply("-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.\r\n"))
	}},
	{"READONLY", func(t *testing.T) string {
		return hostile.Start(t, hostile.Reply("-READONLY You can't write against a read only replica.\r\n"))
	}},
	{"NOSCRIPT forever", func(t *testing.T) string {
		return hostile.Start(t, hostile.Reply("-NOSCRIPT No matching script. Please use EVAL.\r\n"))
	}},
}

func TestHostileMaster_misbehaviourCostsOneVote(t *testing.T) {
	real := redistest.Start(t, 2)
	for _, tc := range misbehaviours {
		t.Run(tc.name, func(t *testing.T) {
			bad := tc.addr(t)
			forEachPath(t, func(t *testing.T, path connPath) {
				c := addrClient(t, path, []string{real[0].Addr(), bad, real[1].Addr()})
				ctx := ctxT(t)
				key := "misbehaviour:" + t.Name()

				// No call waits for the bad master beyond the per-master
				// timeout: the two real masters decide.
				for i := 0; i < 3; i++ {
					start := time.Now()
					l, err := c.TryAcquire(ctx, key)
					if err != nil {
						t.Fatalf("acquisition %d on the healthy quorum: %v", i, err)
					}
					if err := l.Extend(ctx, 5*time.Second); err != nil {
						t.Fatalf("extension %d: %v", i, err)
					}
					if err := l.Release(ctx); err != nil {
						t.Fatalf("release %d: %v", i, err)
					}
					if d := time.Since(start); d > 3*realTimeout {
						t.Errorf("acquire+extend+release %d took %v, want well under %v", i, d, 3*realTimeout)
					}
				}
				lockAndWake(t, c, key)
				leftover.None(t, real, key)

				// Without a quorum of good masters the error names the bad
				// one, and the real master keeps nothing.
				key2 := key + ":two"
				_, err := addrClient(t, path, []string{real[0].Addr(), bad}).TryAcquire(ctx, key2)
				var ne *redlock.NodeError
				if !errors.Is(err, redlock.ErrNotAcquired) || !errors.As(err, &ne) || ne.Addr != bad {
					t.Fatalf("err = %v, want ErrNotAcquired with the NodeError of %s", err, bad)
				}
				leftover.None(t, real[:1], key2)
			})
		})
	}
}
