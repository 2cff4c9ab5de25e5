package redlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// A permit released before the semaphore's minimum hold keeps its slot
// until the minimum, as a lock keeps its key: with both slots of two
// taken, one of them released early, no further permit is granted until
// the minimum; then the released slot is granted again, with a higher
// fencing token.
func TestSemaphore_minHoldKeepsAReleasedPermitsSlotUntilTheMinimum(t *testing.T) {
	rs := startReal(t, 3)
	ctx := ctxT(t)
	const minHold = 1500 * time.Millisecond
	s := newSemaphore(t, rs.client(t, pipelinedPath), "jobs", 2,
		redlock.WithTTL(30*time.Second), redlock.WithMinHold(minHold), redlock.WithFencing())
	other := newSemaphore(t, rs.client(t, pipelinedPath), "jobs", 2, redlock.WithFencing())
	begun := time.Now()
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatalf("early release: %v", err)
	}
	if !errors.Is(p.Err(), redlock.ErrReleased) {
		t.Errorf("Err after the release = %v, want ErrReleased", p.Err())
	}
	// The slot's key stays on every master, expiring within the minimum.
	if !redistest.Within(2*time.Second, func() bool {
		for _, m := range rs.servers {
			v, _ := redis.String(m.Do("GET", p.Key()))
			pttl, _ := redis.Int(m.Do("PTTL", p.Key()))
			if v != p.Token() || pttl <= 0 || pttl > int(minHold/time.Millisecond) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("masters hold %v at %s; want the released permit's token with a PTTL of at most %v",
			rs.values(t, p.Key()), p.Key(), minHold)
	}
	q, err := other.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the other slot: %v", err)
	}
	defer q.Release(ctx)
	if q.Slot() == p.Slot() {
		t.Fatalf("slot %d granted again within the minimum", p.Slot())
	}
	if _, err := other.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("a permit within the minimum, both slots taken: %v, want ErrNotAcquired", err)
	}
	var r *redlock.Permit
	if !redistest.Within(minHold+3*time.Second, func() bool {
		r, err = other.TryAcquire(ctx)
		return err == nil
	}) {
		t.Fatalf("no permit after the minimum: %v", err)
	}
	defer r.Release(ctx)
	if waited := time.Since(begun); waited < minHold {
		t.Errorf("slot %d granted again %v after the first acquisition began; the minimum is %v", r.Slot(), waited, minHold)
	}
	if r.Slot() != p.Slot() || r.Fence() <= p.Fence() {
		t.Errorf("after the minimum: slot %d fence %d; want slot %d with a fence above %d", r.Slot(), r.Fence(), p.Slot(), p.Fence())
	}
}
