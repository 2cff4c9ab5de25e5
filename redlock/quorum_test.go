package redlock_test

// Unit tests of the quorum logic on in-memory fake masters and the fake
// clock. Everything Redis itself does is tested against real redis-server
// in client_basics_redis_test.go.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/fakeredis"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

const (
	fakeTimeout = 100 * time.Millisecond
	fakeTTL     = time.Second
)

type fakeSet struct {
	clk      *clock.Fake
	backoffs chan time.Duration // the client's backoff timers, as they start
	masters  []*fakeredis.Master
	client   *redlock.Client
}

func newFakes(t *testing.T, n int, opts ...redlock.Option) *fakeSet {
	t.Helper()
	fs := &fakeSet{clk: clock.NewFake(time.Unix(1_700_000_000, 0)), backoffs: make(chan time.Duration, 1000)}
	pools := make([]pool.Pool, n)
	for i := range pools {
		m := fakeredis.New(fs.clk, fmt.Sprintf("10.0.0.%d:6379", i+1))
		fs.masters = append(fs.masters, m)
		pools[i] = m
	}
	clk := &backoffClock{Fake: fs.clk, backoffs: fs.backoffs}
	opts = append([]redlock.Option{redlock.WithClock(clk), redlock.WithTimeout(fakeTimeout)}, opts...)
	c, err := redigo.New(pools, opts...)
	if err != nil {
		t.Fatal(err)
	}
	fs.client = c
	// The masters identified first, so that no round of the test waits
	// on the probe beside it: the tests count the fake clock's timers.
	if err := redlock.Identify(c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, m := range fs.masters {
			m.Resume()
		}
		// Let any straggler's timers fire, then wait for every worker.
		for i := 0; i < 4; i++ {
			fs.clk.Advance(fakeTimeout)
		}
		c.Close()
	})
	return fs
}

// backoffClock reports the client's timers other than the collector's
// (which runs for exactly the per-master timeout): its backoff delays,
// which a test then advances past.
type backoffClock struct {
	*clock.Fake
	backoffs chan time.Duration
}

func (b *backoffClock) NewTimer(d time.Duration) clock.Timer {
	t := b.Fake.NewTimer(d)
	if d != fakeTimeout {
		b.backoffs <- d
	}
	return t
}

// driveBackoff advances the clock past each backoff delay until res is
// ready.
func driveBackoff[T any](t *testing.T, fs *fakeSet, res <-chan T) T {
	t.Helper()
	for {
		select {
		case r := <-res:
			return r
		case d := <-fs.backoffs:
			fs.clk.Advance(d)
		case <-time.After(10 * time.Second):
			t.Fatal("no result and no backoff for 10s")
		}
	}
}

// async runs f in a goroutine and returns a channel with its result.
func async[T any](f func() T) <-chan T {
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	return ch
}

type lockResult struct {
	lock *redlock.Lock
	err  error
}

func (fs *fakeSet) tryAcquire(ctx context.Context, key string, opts ...redlock.LockOption) <-chan lockResult {
	return async(func() lockResult {
		l, err := fs.client.TryAcquire(ctx, key, opts...)
		return lockResult{l, err}
	})
}

func (fs *fakeSet) blockUntil(t *testing.T, timers int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fs.clk.BlockUntil(ctx, timers); err != nil {
		t.Fatalf("waiting for %d pending timers (have %d): %v", timers, fs.clk.Pending(), err)
	}
}

// waitCalls waits until every master has run cmd n times: the masters
// that were not needed for the decision run it a little later.
func (fs *fakeSet) waitCalls(t *testing.T, cmd string, n int) {
	t.Helper()
	for _, m := range fs.masters {
		redistest.Eventually(t, 10*time.Second, fmt.Sprintf("master %s runs %s %d times", m.Addr(), cmd, n),
			func() bool { return m.Calls(cmd) >= n })
	}
}

// closeAndCheckNoKey lets every straggler finish, closes the client and
// checks that no master holds key with any value but other's.
func (fs *fakeSet) closeAndCheckNoKey(t *testing.T, key string, other string) {
	t.Helper()
	for _, m := range fs.masters {
		m.Resume()
	}
	for i := 0; i < 4; i++ {
		fs.clk.Advance(fakeTimeout)
	}
	fs.client.Close()
	for i, m := range fs.masters {
		if v, ok := m.Get(key); ok && v != other {
			t.Errorf("master %d still holds %q = %q", i, key, v)
		}
	}
}

func TestTryAcquire_earlySuccessDoesNotWaitForHungMasters(t *testing.T) {
	fs := newFakes(t, 5)
	fs.masters[3].Hang()
	fs.masters[4].Hang()
	start := fs.clk.Now()

	// No clock advance: the three healthy masters decide.
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	drift := time.Duration(float64(fakeTTL)*redlock.DefaultDriftFactor) + 2*time.Millisecond
	if want := start.Add(fakeTTL - drift); !l.Until().Equal(want) {
		t.Errorf("Until = %v, want %v", l.Until(), want)
	}
	for i := 0; i < 3; i++ {
		if v, _ := fs.masters[i].Get("k"); v != l.Token() {
			t.Errorf("master %d holds %q, want the token", i, v)
		}
	}
	// The hung masters answer late: the lock still releases everywhere,
	// and no release overtakes their SET.
	fs.masters[3].Resume()
	fs.masters[4].Resume()
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	fs.closeAndCheckNoKey(t, "k", "")
}

func TestTryAcquire_earlyFailureWhenQuorumImpossible(t *testing.T) {
	fs := newFakes(t, 5)
	for i := 0; i < 3; i++ {
		fs.masters[i].Set("k", "other", time.Minute)
	}
	fs.masters[3].Hang()
	fs.masters[4].Hang()

	// Three refusals make a quorum of 3 impossible: no clock advance is
	// needed, the hung masters are not waited for.
	_, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrNotAcquired", err)
	}
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("err %T is not a *QuorumError", err)
	}
	if len(qe.Refused) != 3 || qe.Succeeded != 0 || qe.Quorum != 3 || qe.Masters != 5 || qe.Failed != nil {
		t.Errorf("QuorumError = %+v", qe)
	}
	// The hung masters come back and run their SETs late: each is rolled
	// back right after.
	fs.closeAndCheckNoKey(t, "k", "other")
	for i := 3; i < 5; i++ {
		if fs.masters[i].Calls("SET") != 1 || fs.masters[i].Calls("release") != 1 {
			t.Errorf("master %d: SET %d, release %d; want 1 each", i, fs.masters[i].Calls("SET"), fs.masters[i].Calls("release"))
		}
	}
	for i := 0; i < 3; i++ {
		if v, _ := fs.masters[i].Get("k"); v != "other" {
			t.Errorf("master %d: the other holder's key was touched: %q", i, v)
		}
	}
}

func TestTryAcquire_masterTimeoutIsNotCallersDeadline(t *testing.T) {
	fs := newFakes(t, 1)
	fs.masters[0].Hang()
	res := fs.tryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	fs.blockUntil(t, 2) // the collector and the hung master's deadline
	fs.clk.Advance(fakeTimeout)
	r := <-res
	var ne *redlock.NodeError
	if !errors.As(r.err, &ne) || !errors.Is(ne, redlock.ErrMasterTimeout) || ne.Index != 0 || ne.Addr != "10.0.0.1:6379" {
		t.Errorf("no *NodeError for master 0 with ErrMasterTimeout in %v", r.err)
	}
	if errors.Is(r.err, context.DeadlineExceeded) {
		t.Error("a master's timeout must not look like the caller's deadline")
	}
	fs.closeAndCheckNoKey(t, "k", "other")
}

func TestTryAcquire_failedAttemptLeavesNoKey(t *testing.T) {
	fs := newFakes(t, 3)
	fs.masters[0].Set("k", "other", time.Minute)
	fs.masters[1].Set("k", "other", time.Minute)
	// Every master answers at once: no clock advance needed.
	_, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("err = %v", err)
	}
	// Master 2 granted (before or after the decision) and is rolled back.
	fs.closeAndCheckNoKey(t, "k", "other")
	if got := fs.masters[2].Calls("release"); got != 1 {
		t.Errorf("release calls on master 2 = %d, want 1", got)
	}
}

func TestTryAcquire_brokenConnectionIsRetriedButNotTrustedBlindly(t *testing.T) {
	fs := newFakes(t, 1)
	// The SET runs, then the connection breaks before the reply: the
	// retry finds the key, which may be ours. That is not a refusal.
	fs.masters[0].BreakNextReply()
	_, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || len(qe.Refused) != 0 || !strings.Contains(err.Error(), "may have run") {
		t.Fatalf("err = %v, want an unknown outcome, not a refusal", err)
	}
	if got := fs.masters[0].Calls("SET"); got != 2 {
		t.Errorf("SET ran %d times, want 2 (one retry)", got)
	}
	// Unknown outcomes are rolled back.
	fs.closeAndCheckNoKey(t, "k", "")

	// An extension is idempotent: its retry's answer counts.
	fs2 := newFakes(t, 3)
	l, err := fs2.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	fs2.waitCalls(t, "SET", 1)
	fs2.masters[0].BreakNextReply()
	if err := l.Extend(context.Background(), fakeTTL); err != nil {
		t.Fatalf("an extension retried after a broken connection is idempotent: %v", err)
	}
}

func TestTryAcquire_lateSuccessIsRolledBack(t *testing.T) {
	fs := newFakes(t, 3)
	fs.masters[1].Set("k", "other", time.Minute)
	// Master 2 runs the SET at once but its reply arrives after the
	// per-master timeout: a success that comes too late.
	fs.masters[2].SetDelay(2 * fakeTimeout)

	res := fs.tryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	// Masters 0 and 1 answer at once, but their answers may be read after
	// the advance below: the round then waits on only until they are.
	fs.blockUntil(t, 3) // collector's timer, master 2's deadline and delay
	if v, _ := fs.masters[2].Get("k"); v == "" || v == "other" {
		t.Fatalf("master 2 should hold our token by now, holds %q", v)
	}
	fs.masters[2].SetDelay(0) // the rollback, later, is answered at once
	fs.clk.Advance(fakeTimeout)
	r := <-res
	if !errors.Is(r.err, redlock.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrNotAcquired", r.err)
	}
	fs.closeAndCheckNoKey(t, "k", "other")
	if v, _ := fs.masters[1].Get("k"); v != "other" {
		t.Errorf("master 1 lost the other holder's key: %q", v)
	}
}

func TestTryAcquire_validityCountsElapsedAndDrift(t *testing.T) {
	fs := newFakes(t, 3, redlock.WithDriftFactor(0.05))
	for _, m := range fs.masters {
		m.SetDelay(30 * time.Millisecond)
	}
	start := fs.clk.Now()
	res := fs.tryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	fs.blockUntil(t, 7) // collector + a deadline and a delay per master
	fs.clk.Advance(30 * time.Millisecond)
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	drift := time.Duration(float64(fakeTTL)*0.05) + 2*time.Millisecond
	if want := start.Add(fakeTTL - drift); !r.lock.Until().Equal(want) {
		t.Errorf("Until = %v, want start + TTL - drift = %v", r.lock.Until(), want)
	}
	// Validity left, as the caller sees it, is TTL - elapsed - drift.
	if left := r.lock.Until().Sub(fs.clk.Now()); left != fakeTTL-30*time.Millisecond-drift {
		t.Errorf("validity left = %v, want %v", left, fakeTTL-30*time.Millisecond-drift)
	}
}

// stallClock is a fake clock that jumps forward when the attempt measures
// its elapsed time, like a client paused between the replies and the
// validity check.
type stallClock struct {
	*clock.Fake
	jump time.Duration
}

func (s *stallClock) Since(t time.Time) time.Duration {
	s.Fake.Advance(s.jump)
	return s.Fake.Since(t)
}

// stalledClient returns a client on three fake masters on fake, whose
// timing it reads from clk (a clock that stalls).
func stalledClient(t *testing.T, clk clock.Clock, fake *clock.Fake) (*redlock.Client, []*fakeredis.Master) {
	t.Helper()
	masters := make([]*fakeredis.Master, 3)
	pools := make([]pool.Pool, 3)
	for i := range masters {
		masters[i] = fakeredis.New(fake, fmt.Sprintf("m%d:1", i))
		pools[i] = masters[i]
	}
	c, err := redigo.New(pools, redlock.WithClock(clk), redlock.WithTimeout(fakeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	return c, masters
}

func TestTryAcquire_noValidityLeftFailsAndRollsBack(t *testing.T) {
	clk := &stallClock{Fake: clock.NewFake(time.Unix(0, 0)), jump: fakeTTL}
	c, masters := stalledClient(t, clk, clk.Fake)
	_, err := c.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || !qe.NoValidity || qe.Succeeded < 2 {
		t.Fatalf("err = %v, want a QuorumError with NoValidity after a quorum of grants", err)
	}
	if !strings.Contains(err.Error(), "no validity") {
		t.Errorf("message does not say why: %v", err)
	}
	c.Close() // the third master's worker may still be rolling back
	for i, m := range masters {
		if _, ok := m.Get("k"); ok {
			t.Errorf("master %d still holds the key", i)
		}
	}
}

func TestAcquire_retriesWithBackoffUntilFree(t *testing.T) {
	fs := newFakes(t, 1)
	fs.masters[0].Set("k", "other", 200*time.Millisecond)
	start := fs.clk.Now()
	r := driveBackoff(t, fs, async(func() lockResult {
		l, err := fs.client.Acquire(context.Background(), "k", redlock.WithTTL(fakeTTL),
			redlock.WithBackoff(10*time.Millisecond, 40*time.Millisecond))
		return lockResult{l, err}
	}))
	if r.err != nil {
		t.Fatal(r.err)
	}
	if el := fs.clk.Since(start); el < 200*time.Millisecond || el > 240*time.Millisecond {
		t.Errorf("acquired at +%v; the other lock expired at +200ms, the longest delay is 40ms", el)
	}
	// Delays 10, 20, 40, 40, ... each drawn from [d/2, d]: 200ms takes
	// between 5 and 17 retries.
	if sets := fs.masters[0].Calls("SET"); sets < 6 || sets > 18 {
		t.Errorf("%d attempts to wait out 200ms with 10-40ms backoff", sets)
	}
}

func TestAcquire_givesUpAfterWait(t *testing.T) {
	fs := newFakes(t, 3)
	for _, m := range fs.masters {
		m.Set("k", "other", time.Hour)
	}
	start := fs.clk.Now()
	err := driveBackoff(t, fs, async(func() error {
		_, err := fs.client.Acquire(context.Background(), "k", redlock.WithTTL(fakeTTL), redlock.WithWait(300*time.Millisecond))
		return err
	}))
	if !errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotAcquired only", err)
	}
	// The last attempt is made at the bound itself, not a backoff early.
	if el := fs.clk.Since(start); el != 300*time.Millisecond {
		t.Errorf("gave up after %v; the wait was 300ms", el)
	}
}

func TestAcquire_withWaitZeroMakesOneAttempt(t *testing.T) {
	fs := newFakes(t, 1)
	fs.masters[0].Set("k", "other", time.Hour)
	_, err := fs.client.Acquire(context.Background(), "k", redlock.WithTTL(fakeTTL), redlock.WithWait(0))
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("err = %v", err)
	}
	if got := fs.masters[0].Calls("SET"); got != 1 {
		t.Errorf("SET calls = %d, want 1", got)
	}
}

func TestAcquire_ctxCancelDuringBackoff(t *testing.T) {
	fs := newFakes(t, 3)
	for _, m := range fs.masters {
		m.Set("k", "other", time.Hour)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := async(func() error {
		_, err := fs.client.Acquire(ctx, "k", redlock.WithTTL(fakeTTL))
		return err
	})
	<-fs.backoffs // the first attempt failed and the client is waiting
	cancel()
	err := <-res
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want both ErrNotAcquired and context.Canceled", err)
	}
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || len(qe.Refused) < 2 {
		t.Errorf("the last attempt's details are lost: %v", err)
	}
}

func TestTryAcquire_ctxCancelMidAttemptLeavesNoKey(t *testing.T) {
	fs := newFakes(t, 3)
	for _, m := range fs.masters {
		m.Hang()
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := fs.tryAcquire(ctx, "k", redlock.WithTTL(fakeTTL))
	fs.blockUntil(t, 4)
	cancel()
	r := <-res
	if !errors.Is(r.err, redlock.ErrNotAcquired) || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("err = %v", r.err)
	}
	// The masters wake up and run the SETs the cancelled caller sent; the
	// rollback follows on each, under its own context.
	fs.closeAndCheckNoKey(t, "k", "")
	for i, m := range fs.masters {
		if m.Calls("SET") != 1 || m.Calls("release") != 1 {
			t.Errorf("master %d: SET %d, release %d; want 1 each", i, m.Calls("SET"), m.Calls("release"))
		}
	}
}

func TestTryAcquire_cancelledCtxSendsNothing(t *testing.T) {
	fs := newFakes(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := fs.client.TryAcquire(ctx, "k")
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	for i, m := range fs.masters {
		if m.Calls("SET") != 0 {
			t.Errorf("master %d got a SET", i)
		}
	}
}

func TestTryAcquire_minorityDownStillAcquires(t *testing.T) {
	fs := newFakes(t, 5)
	fs.masters[0].SetDown(true)
	fs.masters[1].SetReplyError(redis.Error("OOM command not allowed when used memory > 'maxmemory'."))
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestTryAcquire_majorityDownNamesMasters(t *testing.T) {
	fs := newFakes(t, 3)
	fs.masters[0].SetDown(true)
	fs.masters[2].SetReplyError(redis.Error("READONLY You can't write against a read only replica."))
	_, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("err = %v", err)
	}
	if !errors.Is(err, fakeredis.ErrDown) {
		t.Errorf("errors.Is does not reach the master's own error: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"10.0.0.1:6379", "10.0.0.3:6379", "READONLY", "2 needed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not mention %q", msg, want)
		}
	}
	var ne *redlock.NodeError
	if !errors.As(err, &ne) || (ne.Index != 0 && ne.Index != 2) {
		t.Errorf("errors.As(*NodeError) = %+v", ne)
	}
}

func TestLock_Extend(t *testing.T) {
	fs := newFakes(t, 3)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	fs.clk.Advance(500 * time.Millisecond)
	fs.waitCalls(t, "SET", 1)
	start := fs.clk.Now()
	if err := l.Extend(context.Background(), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	drift := time.Duration(float64(2*time.Second)*redlock.DefaultDriftFactor) + 2*time.Millisecond
	if want := start.Add(2*time.Second - drift); !l.Until().Equal(want) {
		t.Errorf("Until after extend = %v, want %v", l.Until(), want)
	}
	// The old TTL would have expired the key by now; the extension keeps it.
	fs.waitCalls(t, "extend", 1)
	fs.clk.Advance(time.Second)
	for i, m := range fs.masters {
		if v, _ := m.Get("k"); v != l.Token() {
			t.Errorf("master %d lost the extended key", i)
		}
	}
}

func TestLock_Extend_expiredIsLostWithoutTraffic(t *testing.T) {
	fs := newFakes(t, 3)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	fs.waitCalls(t, "SET", 1) // the straggler's SET too
	fs.clk.Advance(fakeTTL)
	err = l.Extend(context.Background(), fakeTTL)
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("err = %v, want ErrLockLost", err)
	}
	for i, m := range fs.masters {
		if m.Calls("extend") != 0 {
			t.Errorf("master %d got an extend for an expired lock", i)
		}
		if _, ok := m.Get("k"); ok {
			t.Errorf("master %d holds the key again", i)
		}
	}
}

func TestLock_Extend_quorumRefusesIsLost(t *testing.T) {
	fs := newFakes(t, 3)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	fs.masters[0].Set("k", "other", time.Minute)
	fs.masters[1].Set("k", "other", time.Minute)
	err = l.Extend(context.Background(), fakeTTL)
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("err = %v, want ErrLockLost", err)
	}
	if v, _ := fs.masters[0].Get("k"); v != "other" {
		t.Error("extend touched another holder's key")
	}
}

func TestLock_Extend_unreachableIsNotExtended(t *testing.T) {
	fs := newFakes(t, 3)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	until := l.Until()
	fs.masters[0].SetDown(true)
	fs.masters[1].SetDown(true)
	err = l.Extend(context.Background(), fakeTTL)
	if !errors.Is(err, redlock.ErrNotExtended) || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("err = %v, want ErrNotExtended (the lock is still valid)", err)
	}
	if !l.Until().Equal(until) {
		t.Error("a failed extend changed Until")
	}
}

func TestLock_Release(t *testing.T) {
	fs := newFakes(t, 3)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("second release = %v, want ErrNotHeld", err)
	}
	if err := l.Extend(context.Background(), fakeTTL); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("extend after release = %v, want ErrNotHeld", err)
	}
	fs.closeAndCheckNoKey(t, "k", "")
	for i, m := range fs.masters {
		if got := m.Calls("release"); got != 1 {
			t.Errorf("master %d: %d releases, want 1", i, got)
		}
	}
}

func TestLock_Release_takenByOtherIsNotHeld(t *testing.T) {
	fs := newFakes(t, 3)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	fs.clk.Advance(fakeTTL) // expired everywhere
	fs.masters[0].Set("k", "other", time.Minute)
	err = l.Release(context.Background())
	if !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("err = %v, want ErrNotHeld", err)
	}
	if v, _ := fs.masters[0].Get("k"); v != "other" {
		t.Error("release deleted another holder's key")
	}
}

func TestLock_Release_unreachableIsNotReleased(t *testing.T) {
	fs := newFakes(t, 3)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	fs.masters[1].SetDown(true)
	fs.masters[2].SetDown(true)
	err = l.Release(context.Background())
	if !errors.Is(err, redlock.ErrNotReleased) || errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("err = %v, want ErrNotReleased", err)
	}
}

func TestLock_Release_scriptCacheFlushed(t *testing.T) {
	fs := newFakes(t, 3)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fs.masters {
		m.FlushScripts()
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("release after script flush: %v", err)
	}
}

func TestNew_rejectsBadInput(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	a := fakeredis.New(clk, "a:1")
	b := fakeredis.New(clk, "b:1")
	aAgain := fakeredis.New(clk, "A:1")
	var nilPool *fakeredis.Master
	cases := []struct {
		name  string
		pools []pool.Pool
		opts  []redlock.Option
		want  string
	}{
		{"no masters", nil, nil, "no masters"},
		{"nil pool", []pool.Pool{a, nil}, nil, "pool 1 is nil"},
		{"typed nil pool", []pool.Pool{a, nilPool}, nil, "pool 1 is nil"},
		{"same pool twice", []pool.Pool{a, b, a}, nil, "masters 0 and 2 are the same master"},
		{"same address twice", []pool.Pool{a, aAgain}, nil, "same master (A:1)"},
		{"zero timeout", []pool.Pool{a}, []redlock.Option{redlock.WithTimeout(0)}, "timeout must be positive"},
		{"drift 1", []pool.Pool{a}, []redlock.Option{redlock.WithDriftFactor(1)}, "drift factor"},
		{"negative drift", []pool.Pool{a}, []redlock.Option{redlock.WithDriftFactor(-0.1)}, "drift factor"},
		{"nil clock", []pool.Pool{a}, []redlock.Option{redlock.WithClock(nil)}, "clock is nil"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := redigo.New(tc.pools, tc.opts...)
			if !errors.Is(err, redlock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

func TestTryAcquire_rejectsBadOptionsWithoutTraffic(t *testing.T) {
	fs := newFakes(t, 3)
	cases := []struct {
		name string
		key  string
		opts []redlock.LockOption
		want string
	}{
		{"empty key", "", nil, "empty key"},
		{"zero TTL", "k", []redlock.LockOption{redlock.WithTTL(0)}, "at least 1ms"},
		{"negative TTL", "k", []redlock.LockOption{redlock.WithTTL(-time.Second)}, "at least 1ms"},
		{"TTL below timeout", "k", []redlock.LockOption{redlock.WithTTL(fakeTimeout)}, "leaves no validity"},
		{"absurd TTL", "k", []redlock.LockOption{redlock.WithTTL(1 << 62)}, "longer than the maximum"},
		{"negative wait", "k", []redlock.LockOption{redlock.WithWait(-1)}, "wait must not be negative"},
		{"bad backoff", "k", []redlock.LockOption{redlock.WithBackoff(time.Second, time.Millisecond)}, "backoff"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fs.client.Acquire(context.Background(), tc.key, tc.opts...)
			if !errors.Is(err, redlock.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
	for i, m := range fs.masters {
		if m.Calls("SET") != 0 {
			t.Errorf("master %d received a SET", i)
		}
	}
}

func TestClient_Close_rejectsNewWork(t *testing.T) {
	fs := newFakes(t, 1)
	l, err := fs.client.TryAcquire(context.Background(), "k", redlock.WithTTL(fakeTTL))
	if err != nil {
		t.Fatal(err)
	}
	fs.client.Close()
	if _, err := fs.client.TryAcquire(context.Background(), "k2"); !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("TryAcquire after Close = %v, want ErrClosed", err)
	}
	if err := l.Release(context.Background()); !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("Release after Close = %v, want ErrClosed", err)
	}
}

func TestBackoff_jitteredExponentialWithCap(t *testing.T) {
	min, max := 10*time.Millisecond, 100*time.Millisecond
	for attempt := 0; attempt < 70; attempt++ {
		d := min << attempt
		if attempt >= 30 || d > max || d <= 0 {
			d = max
		}
		for i := 0; i < 50; i++ {
			got := redlock.Backoff(min, max, attempt)
			if got < d/2 || got > d {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, got, d/2, d)
			}
		}
	}
}
