package clockfault_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/clockfault"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// master starts a redis-server under a new Clock.
func master(t *testing.T) (*redistest.Server, *clockfault.Clock) {
	t.Helper()
	redistest.SkipShort(t)
	c, err := clockfault.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	env, err := c.Env()
	if err != nil {
		t.Fatal(err)
	}
	return redistest.StartOne(t, redistest.WithEnv(env...)), c
}

// serverTime reads the master's TIME (its wall clock).
func serverTime(t *testing.T, s *redistest.Server) time.Time {
	t.Helper()
	v, err := redis.Int64s(s.Do("TIME"))
	if err != nil || len(v) != 2 {
		t.Fatalf("TIME: %v %v", v, err)
	}
	return time.Unix(v[0], v[1]*1000)
}

// measuredRate samples TIME against the test's monotonic clock, each end
// the quickest of a few round trips (the machine may be busy).
func measuredRate(t *testing.T, s *redistest.Server, over time.Duration) float64 {
	t.Helper()
	read := func() (local, server time.Time) {
		best := time.Duration(-1)
		for i := 0; i < 5; i++ {
			before := time.Now()
			st := serverTime(t, s)
			if rtt := time.Since(before); best < 0 || rtt < best {
				best, local, server = rtt, before.Add(rtt/2), st
			}
		}
		return local, server
	}
	m0, w0 := read()
	time.Sleep(over) // the subject: real time past the key's TTL on the fast clock
	m1, w1 := read()
	return float64(w1.Sub(w0)) / float64(m1.Sub(m0))
}

func TestClock_rateMakesKeysExpireEarly(t *testing.T) {
	s, c := master(t)
	if off := serverTime(t, s).Sub(time.Now()); off.Abs() > 100*time.Millisecond {
		t.Fatalf("an untouched clock is %v off", off)
	}
	if err := c.SetRate(1.5); err != nil {
		t.Fatal(err)
	}
	if r := measuredRate(t, s, 2*time.Second); math.Abs(r-1.5) > 0.05 {
		t.Fatalf("measured rate %.3f, want 1.5", r)
	}
	if _, err := s.Do("SET", "k", "v", "PX", 3000); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	redistest.Eventually(t, 10*time.Second, "the key expires", func() bool {
		n, err := redis.Int(s.Do("EXISTS", "k"))
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	// 3000 ms of the master's clock at 1.5 times real speed: 2 s (a real
	// clock: 3 s). A busy machine may delay the test's polling.
	if d := time.Since(start); d < 1800*time.Millisecond || d > 2600*time.Millisecond {
		t.Fatalf("a 3000 ms key went after %v, want about 2 s", d)
	}
	t.Logf("a 3000 ms key on a master 50%% fast went after %v", time.Since(start).Round(time.Millisecond))
}

func TestClock_jumpExpiresKeysAtOnce(t *testing.T) {
	s, c := master(t)
	if _, err := s.Do("SET", "k", "v", "PX", 10000); err != nil {
		t.Fatal(err)
	}
	if err := c.Jump(11 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := redis.Int(s.Do("EXISTS", "k")); err != nil || n != 0 {
		t.Fatalf("EXISTS after an 11 s jump over a 10 s key: %d %v, want 0", n, err)
	}
	off := serverTime(t, s).Sub(time.Now())
	if off < 10900*time.Millisecond || off > 11100*time.Millisecond {
		t.Fatalf("offset after the jump %v, want 11s", off)
	}
	if got := c.Offset(); (got - 11*time.Second).Abs() > 10*time.Millisecond {
		t.Fatalf("Offset() = %v, want 11s", got)
	}
	// A restarted master keeps its clock, as a machine would.
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if off := serverTime(t, s).Sub(time.Now()); (off - 11*time.Second).Abs() > 100*time.Millisecond {
		t.Fatalf("offset after a restart %v, want 11s", off)
	}
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	if off := serverTime(t, s).Sub(time.Now()); off.Abs() > 100*time.Millisecond {
		t.Fatalf("offset after Reset %v, want 0", off)
	}
}

func TestClock_rateChangesAreContinuous(t *testing.T) {
	c, err := clockfault.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetRate(2); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the subject: time runs at rate 2 for a while
	before := c.Offset()
	if err := c.SetRate(1); err != nil {
		t.Fatal(err)
	}
	after := c.Offset()
	if before < 40*time.Millisecond || (after-before).Abs() > 5*time.Millisecond {
		t.Fatalf("offset %v before the rate change, %v after: want about 50ms, unchanged", before, after)
	}
	if c.Rate() != 1 {
		t.Fatalf("Rate() = %v, want 1", c.Rate())
	}
}

func TestClock_SetRate_rejectsBadRates(t *testing.T) {
	c, err := clockfault.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if err := c.SetRate(r); err == nil {
			t.Errorf("SetRate(%v) succeeded", r)
		}
	}
	c.Close()
	if err := c.Jump(time.Second); err == nil || errors.Is(err, nil) {
		t.Fatalf("Jump after Close: %v, want an error", err)
	}
}
