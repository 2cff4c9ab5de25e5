package redlock_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// Unit tests of token choice and commit counting on fake masters; the
// real-Redis tests are in fence_redis_test.go.

func TestFence_tokenIsOneMoreThanLargestGrantedCounter(t *testing.T) {
	fs := newFakes(t, 5)
	fk := layout.FenceKey("k")
	for i, c := range []uint64{7, 41, 3, 99, 12} {
		fs.masters[i].Set(fk, strconv.FormatUint(c, 10), 0)
	}
	// Master 3 (counter 99) refuses: the lock is held there by someone
	// else, so its counter is not among the granting masters'.
	fs.masters[3].Set("k", "other", time.Minute)

	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL), redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	// The three masters the decision waited for are any three of the
	// four that grant; the token is one more than the largest counter
	// among them: 42 whenever master 1 is among them, which it must be
	// unless masters 0, 2 and 4 answered first (then 13).
	if f := l.Fence(); f != 42 && f != 13 {
		t.Fatalf("Fence() = %d, want 42 (or 13)", f)
	}
	committed := 0
	for i, m := range fs.masters {
		v, _ := m.Get(fk)
		// Master 3 refused (its 99 proves nothing); a committing master
		// whose counter was already above the token keeps it.
		if n, _ := strconv.ParseUint(v, 10, 64); i != 3 && n >= l.Fence() {
			committed++
		}
	}
	if committed < 3 {
		t.Errorf("counter ≥ token on %d masters, want a quorum", committed)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	fs.closeAndCheckNoKey(t, "k", "other")
}

func TestFence_withoutFencingIsZeroAndTouchesNoCounter(t *testing.T) {
	fs := newFakes(t, 3)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() != 0 {
		t.Errorf("Fence() = %d without WithFencing, want 0", l.Fence())
	}
	for i, m := range fs.masters {
		if v, ok := m.Get(layout.FenceKey("k")); ok {
			t.Errorf("master %d has a fence counter %q", i, v)
		}
	}
	_ = l.Release(context.Background())
	fs.closeAndCheckNoKey(t, "k", "")
}

func TestFence_commitLostOnMinorityStillAcquires(t *testing.T) {
	fs := newFakes(t, 5)
	// Between the two phases the lock vanishes from two masters (they
	// restarted, say): their commit is refused, three commit.
	fs.masters[0].DropBefore("fence_commit", "k")
	fs.masters[1].DropBefore("fence_commit", "k")
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL), redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() != 1 {
		t.Errorf("Fence() = %d on fresh masters, want 1", l.Fence())
	}
	_ = l.Release(context.Background())
	fs.closeAndCheckNoKey(t, "k", "")
}

func TestFence_commitLostOnMajorityFailsAndRollsBack(t *testing.T) {
	fs := newFakes(t, 5)
	for i := 0; i < 3; i++ {
		fs.masters[i].DropBefore("fence_commit", "k")
	}
	_, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL), redlock.WithFencing())
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrNotAcquired", err)
	}
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || qe.Op != "commit fence" || len(qe.Refused) < 3 {
		t.Fatalf("err = %#v, want a commit-fence QuorumError with 3 refusals", err)
	}
	fs.closeAndCheckNoKey(t, "k", "")
}

// secondStallClock jumps forward at the attempt's second measure of its
// elapsed time: the client stalled during the fence commit.
type secondStallClock struct {
	*clock.Fake
	jump  time.Duration
	calls atomic.Int32
}

func (s *secondStallClock) Since(t time.Time) time.Duration {
	if s.calls.Add(1) == 2 {
		s.Fake.Advance(s.jump)
	}
	return s.Fake.Since(t)
}

func TestFence_commitThatTakesTheValidityFails(t *testing.T) {
	clk := &secondStallClock{Fake: clock.NewFake(time.Unix(0, 0)), jump: fakeTTL}
	c, masters := stalledClient(t, clk, clk.Fake)
	_, err := c.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL), redlock.WithFencing())
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || !qe.NoValidity || qe.Op != "commit fence" || !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("err = %v, want a commit-fence QuorumError with NoValidity", err)
	}
	c.Close()
	for i, m := range masters {
		if _, ok := m.Get("k"); ok {
			t.Errorf("master %d still holds the key", i)
		}
	}
}

func TestFence_counterOutOfRangeIsAFailedMaster(t *testing.T) {
	fs := newFakes(t, 3)
	fs.masters[0].Set(layout.FenceKey("k"), "9007199254740992", 0) // 2^53
	fs.masters[1].Set(layout.FenceKey("k"), "not a number", 0)
	_, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL), redlock.WithFencing())
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrNotAcquired", err)
	}
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || qe.Failed == nil {
		t.Fatalf("err = %v, want failed masters named", err)
	}
	fs.closeAndCheckNoKey(t, "k", "")
}
