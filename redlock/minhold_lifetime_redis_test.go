package redlock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// An auto-extended lock released before a minimum hold longer than its
// TTL keeps its key past the TTL, until about the minimum, on every
// master; the Lock itself is over (Lost closed, Extend and a second
// Release refused, no watchdog extension after it), and the same client's
// next acquisition (a new token) is refused until the minimum, then
// granted.
func TestMinHold_longerThanTheTTLOutlivesAWatchdogLock(t *testing.T) {
	// A TTL of 2 s, not less: on two loaded cores (load average 40 and
	// more) a 1 s lock can run out of validity before its first extension.
	const ttl, minHold = 2 * time.Second, 5 * time.Second
	rs := startReal(t, 3)
	c := rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	begun := time.Now()
	l, err := c.Acquire(ctx, "slot", redlock.WithTTL(ttl), redlock.WithAutoExtend(0), redlock.WithMinHold(minHold))
	if err != nil {
		t.Fatal(err)
	}
	from := l.Until()
	if !redistest.Within(ttl, func() bool { return l.Until().After(from) }) {
		t.Fatalf("the watchdog did not extend the lock, valid until %v (%v ago): %v", l.Until().Format(time.StampMicro), time.Since(l.Until()), l.Err())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("early release: %v", err)
	}
	select {
	case <-l.Lost():
	default:
		t.Error("Lost is open after the release")
	}
	if err := l.Extend(ctx, ttl); err == nil {
		t.Error("Extend after the release succeeded")
	}
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("second Release = %v, want ErrNotHeld", err)
	}
	// Every master keeps the token past the TTL, for what is left of the
	// minimum.
	if !redistest.Within(time.Second, func() bool {
		for _, s := range rs.servers {
			v, _ := redis.String(s.Do("GET", "slot"))
			pttl, _ := redis.Int(s.Do("PTTL", "slot"))
			if v != l.Token() || pttl <= int(ttl/time.Millisecond) || pttl > int(minHold/time.Millisecond) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("masters hold %v; want the token with a PTTL between the TTL and the minimum", rs.values(t, "slot"))
	}
	if _, err := c.TryAcquire(ctx, "slot"); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("the same client's TryAcquire within the minimum: %v, want ErrNotAcquired", err)
	}
	var l2 *redlock.Lock
	var asked time.Time
	if !redistest.Within(minHold+2*time.Second, func() bool {
		asked = time.Now()
		l2, err = c.TryAcquire(ctx, "slot")
		return err == nil
	}) {
		t.Fatalf("not free after the minimum: %v", err)
	}
	defer l2.Release(ctx)
	// The minimum counts from the winning attempt's start, after begun,
	// however long the watchdog took to extend before the release. Each
	// master counts what is left of it by its own clock, which is not the
	// test's monotonic one: WithMinHold promises the minimum less a drift
	// allowance.
	allow := time.Duration(float64(minHold)*redlock.DefaultDriftFactor) + 2*time.Millisecond
	if waited := time.Since(begun); waited < minHold-allow {
		t.Errorf("taken again %v after the acquisition began; the minimum is %v, less a drift allowance of %v", waited, minHold, allow)
	}
	handedOver(t, rs, l, l2, asked)
}

// handedOver checks the masters right after next was granted the key
// that old held, in an attempt that started at asked: old's validity had
// ended by then, a quorum holds next's token, and old's token is on the
// rest at most, until it expires there by itself. A master outside
// next's quorum may still hold old's token for a moment: the early
// release's time to live counts from when each master runs it, so the
// one that ran it last lets the token go last.
func handedOver(t *testing.T, rs *realSet, old, next *redlock.Lock, asked time.Time) {
	t.Helper()
	if !old.Until().Before(asked) {
		t.Errorf("granted in an attempt started at %v, within the released hold's validity (until %v)",
			asked.Format(time.StampMicro), old.Until().Format(time.StampMicro))
	}
	quorum := len(rs.servers)/2 + 1
	vals := rs.values(t, "slot")
	if got := count(vals, next.Token()); got < quorum {
		t.Errorf("the new token is on %d masters, want a quorum of %d: %s", got, quorum, labelled(vals, old, next))
	}
	if got := count(vals, old.Token()); got > len(rs.servers)-quorum {
		t.Errorf("the released token is on %d masters beside a granted hold: %s", got, labelled(vals, old, next))
	}
	if !redistest.Within(2*time.Second, func() bool { return count(rs.values(t, "slot"), old.Token()) == 0 }) {
		t.Errorf("the released token is still there: %s", labelled(rs.values(t, "slot"), old, next))
	}
}

// labelled names each master's value as the old token, the new one, or
// what else it is.
func labelled(vals []string, old, next *redlock.Lock) string {
	out := make([]string, len(vals))
	for i, v := range vals {
		switch v {
		case old.Token():
			out[i] = "old"
		case next.Token():
			out[i] = "new"
		case "":
			out[i] = "none"
		default:
			out[i] = fmt.Sprintf("%q", v)
		}
	}
	return fmt.Sprint(out)
}

// The early release's time to live counts from when each master runs it:
// a master that runs it late, here one stopped during the release, keeps
// the released token that much past the minimum. The next holder does not
// wait for it: the other masters, a quorum, grant the key at the minimum,
// long after the released hold's validity ended, and the late master lets
// the token go by itself.
func TestMinHold_aMasterThatRunsTheReleaseLateKeepsTheTokenByItsDelay(t *testing.T) {
	const ttl, minHold, late = 2 * time.Second, 2500 * time.Millisecond, 800 * time.Millisecond
	rs := startReal(t, 3)
	// A per-master timeout longer than the stop: the stopped master's
	// command stays on its connection and runs when it resumes.
	c := rs.client(t, pipelinedPath, redlock.WithTimeout(1500*time.Millisecond))
	ctx := ctxT(t)
	l, err := c.Acquire(ctx, "slot", redlock.WithTTL(ttl), redlock.WithMinHold(minHold))
	if err != nil {
		t.Fatal(err)
	}
	const stopped = 2
	rs.pause(t, stopped)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("early release with master %d stopped: %v", stopped, err)
	}
	time.Sleep(late) // the passage of time is the subject: the release's delay to the stopped master
	if err := rs.servers[stopped].Resume(); err != nil {
		t.Fatal(err)
	}
	pttl := func(i int) int {
		p, _ := redis.Int(rs.servers[i].Do("PTTL", "slot"))
		return p
	}
	// The stopped master ran the release on resuming: its key now outlives
	// the others' by about the delay.
	if !redistest.Within(2*time.Second, func() bool { return pttl(stopped) > pttl(0)+int(late/2/time.Millisecond) }) {
		t.Fatalf("PTTLs %d %d %d; want master %d's about %v above the others'", pttl(0), pttl(1), pttl(stopped), stopped, late)
	}
	var l2 *redlock.Lock
	var asked time.Time
	if !redistest.Within(minHold+2*time.Second, func() bool {
		asked = time.Now()
		l2, err = c.TryAcquire(ctx, "slot")
		return err == nil
	}) {
		t.Fatalf("not free after the minimum: %v", err)
	}
	defer l2.Release(ctx)
	if v, _ := redis.String(rs.servers[stopped].Do("GET", "slot")); v != l.Token() {
		t.Errorf("master %d holds %q at the grant; want the released token still there: the grant did not wait for it", stopped, v)
	}
	handedOver(t, rs, l, l2, asked)
}
