package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// checkOneStatement fails when msg says the package prefix or the key more
// than once, or takes more than one line.
func checkOneStatement(t *testing.T, msg, key string) {
	t.Helper()
	if n := strings.Count(msg, "redlock:"); n != 1 {
		t.Errorf("%q says %q %d times", msg, "redlock:", n)
	}
	if n := strings.Count(msg, `"`+key+`"`); n != 1 {
		t.Errorf("%q names the key %d times", msg, n)
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("%q takes more than one line", msg)
	}
}

func TestQuorumError_Error_heldSaysKeyOnceThenMasters(t *testing.T) {
	fs := newFakes(t, 3)
	ctx := context.Background()
	l, err := fs.client.TryAcquire(ctx, "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// An acquisition returns at a quorum: wait for every master's SET.
	waitForCond(t, func() bool {
		return fs.masters[0].Calls("SET") == 1 && fs.masters[1].Calls("SET") == 1 && fs.masters[2].Calls("SET") == 1
	})
	_, err = fs.client.TryAcquire(ctx, "k", redlock.WithTTL(fakeTTL))
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.As(err, &qe) {
		t.Fatalf("err = %v", err)
	}
	msg := err.Error()
	const want = `redlock: lock "k" not acquired: 0 of 3 masters agreed, 2 needed; held by another token on master `
	if !strings.HasPrefix(msg, want) {
		t.Errorf("message\n%q\ndoes not start with\n%q", msg, want)
	}
	checkOneStatement(t, msg, "k")
	for _, i := range qe.Refused {
		if !strings.Contains(msg, fs.masters[i].Addr()) {
			t.Errorf("%q does not name master %d (%s)", msg, i, fs.masters[i].Addr())
		}
	}
}

func TestQuorumError_Error_failuresAfterTheCount(t *testing.T) {
	fs := newFakes(t, 3)
	fs.masters[0].SetDown(true)
	fs.masters[2].SetReplyError(redis.Error("READONLY You can't write against a read only replica."))
	_, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	msg := err.Error()
	if !strings.HasPrefix(msg, `redlock: lock "k" not acquired: `) || !strings.Contains(msg, "masters agreed, 2 needed; master ") {
		t.Errorf("message %q", msg)
	}
	checkOneStatement(t, msg, "k")
}

// A master that does not answer in time reads "master i (addr): did not
// answer in time (…)", without a second prefix.
func TestNodeError_Error_timeoutSaidOnce(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		for _, s := range rs.servers[1:] {
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			defer s.Resume()
		}
		_, err := c.TryAcquire(context.Background(), "k")
		if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, redlock.ErrMasterTimeout) {
			t.Fatalf("err = %v", err)
		}
		msg := err.Error()
		checkOneStatement(t, msg, "k")
		// A command sent on a live connection "did not answer in time"; one
		// that waited for the connection's dial (the client's first
		// contact), which the frozen master never completed, was not sent:
		// "known down since …, not tried: its dial failed: … timeout" — or,
		// when the first-contact identity probe's dial was that dial,
		// "its last dial failed". On the pooled path the identity probe
		// itself went unanswered for a per-master timeout: the master is
		// down, and the round's command was not tried either: "known down
		// since …, not tried: no reply from the master for over …".
		m1 := "(" + rs.servers[1].Addr() + "): "
		dialFailed := strings.Contains(msg, "not tried: its dial failed: ") || strings.Contains(msg, "not tried: its last dial failed: ")
		pooledDown := !path.pipelined && strings.Contains(msg, m1+"known down since ") &&
			strings.Contains(msg, "not tried: no reply from the master for over ")
		if !strings.Contains(msg, m1+"did not answer in time (") && !pooledDown &&
			!(strings.Contains(msg, m1+"known down since ") && dialFailed && strings.Contains(msg, "timeout")) {
			t.Errorf("message %q does not say master 1 did not answer", msg)
		}
		var ne *redlock.NodeError
		if !errors.As(err, &ne) || strings.Contains(ne.Error(), "redlock:") {
			t.Errorf("NodeError %v", ne)
		}
	})
}

func TestLock_Extend_afterReleaseIsErrNotHeld(t *testing.T) {
	fs := newFakes(t, 3)
	ctx := context.Background()
	l, err := fs.client.TryAcquire(ctx, "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	err = l.Extend(ctx, fakeTTL)
	if !errors.Is(err, redlock.ErrNotHeld) || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after Release = %v, want ErrNotHeld", err)
	}
	if got, want := err.Error(), `redlock: lock "k" not held: extend: the lock was released`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	err = l.Release(ctx)
	if got, want := err.Error(), `redlock: lock "k" not held: already released`; !errors.Is(err, redlock.ErrNotHeld) || got != want {
		t.Errorf("second Release: %q, want %q", got, want)
	}
}

func TestLock_Err_clientClosedSaidOnce(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		l, err := c.TryAcquire(context.Background(), "k", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		lost := l.Lost()
		c.Close()
		<-lost
		err = l.Err()
		if !errors.Is(err, redlock.ErrLockLost) || !errors.Is(err, redlock.ErrClosed) {
			t.Fatalf("Err = %v", err)
		}
		if got, want := err.Error(), `redlock: lock "k" lost: client closed`; got != want {
			t.Errorf("message %q, want %q", got, want)
		}
	})
}

// A Lock no acquisition returned, nil or zero, answers every call without
// a panic: accessors give zero values, operations ErrInvalid.
func TestNilLock_everyCallIsSafe(t *testing.T) {
	ctx := context.Background()
	for name, l := range map[string]*redlock.Lock{"nil": nil, "zero": new(redlock.Lock)} {
		if !l.Until().IsZero() || l.Fence() != 0 || l.Key() != "" || l.Token() != "" || l.Keys() != nil {
			t.Errorf("%s: Until %v, Fence %d, Key %q, Token %q, Keys %v", name, l.Until(), l.Fence(), l.Key(), l.Token(), l.Keys())
		}
		for op, err := range map[string]error{
			"Release": l.Release(ctx), "Extend": l.Extend(ctx, time.Second), "Err": l.Err(),
		} {
			if !errors.Is(err, redlock.ErrInvalid) {
				t.Errorf("%s: %s = %v, want ErrInvalid", name, op, err)
			} else if strings.Count(err.Error(), "redlock:") != 1 {
				t.Errorf("%s: %s = %q", name, op, err)
			}
		}
		select {
		case <-l.Lost():
		default:
			t.Errorf("%s: Lost is not closed", name)
		}
	}
}

// Mixing kinds on one key: the error says which kinds hold it, not the
// master's WRONGTYPE text.
func TestErrWrongKind_saysWhichKindHoldsTheKey(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		ctx := context.Background()
		l, err := c.Acquire(ctx, "k", redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		waitForCond(t, func() bool {
			for _, s := range rs.servers {
				if n, _ := redis.Int(s.Do("EXISTS", "k")); n != 1 {
					return false
				}
			}
			return true
		})
		check := func(what string, err error, holder string) {
			t.Helper()
			if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, redlock.ErrWrongKind) {
				t.Fatalf("%s: err = %v, want ErrNotAcquired and ErrWrongKind", what, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, holder) || strings.Contains(msg, "WRONGTYPE") || strings.Contains(msg, "user_script") {
				t.Errorf("%s: message %q does not say %q plainly", what, msg, holder)
			}
			checkOneStatement(t, msg, "k")
		}
		_, err = c.AcquireRead(ctx, "k", redlock.WithWait(0))
		check("AcquireRead on a plain lock", err,
			"the key is held by a plain, fair, fenced or multi-key lock (a string), not by a read-write lock")
		rl, err := c.NewReentrant("k", "owner", redlock.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		check("a reentrant lock on a plain lock", rl.Acquire(ctx), "not by a reentrant lock")

		// The other way round: a plain lock meets a read-write lock's hash.
		r, err := c.AcquireRead(ctx, "h")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Release(ctx)
		_, err = c.TryAcquire(ctx, "h")
		if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("plain on a read-write lock: %v", err)
		}
	})
}

func waitForCond(t *testing.T, cond func() bool) {
	t.Helper()
	redistest.Eventually(t, 5*time.Second, "the condition", cond)
}
