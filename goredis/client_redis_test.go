package goredis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/redlock"
)

// lockTimeout is the per-master timeout of the tests' redlock.Clients:
// long enough for a loaded CI machine, short against a frozen master.
const lockTimeout = 500 * time.Millisecond

// counter is a go-redis hook counting the commands it sees, per name
// ("set", "evalsha", "eval", "script|load").
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *counter) add(c redis.Cmder) {
	name := strings.ToLower(c.Name())
	if args := c.Args(); name == "script" && len(args) > 1 {
		name += "|" + strings.ToLower(fmt.Sprint(args[1]))
	}
	h.mu.Lock()
	h.n[name]++
	h.mu.Unlock()
}

func (h *counter) get(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[name]
}

func (h *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		h.add(c)
		return next(ctx, c)
	}
}

func (h *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cs []redis.Cmder) error {
		for _, c := range cs {
			h.add(c)
		}
		return next(ctx, cs)
	}
}

// masterSet is n throwaway masters, a go-redis client for each with a
// counting hook (the lock's), and one without (the test's, to look).
type masterSet struct {
	servers  []*server
	clients  []redis.UniversalClient
	hooks    []*counter
	admin    []*redis.Client
	monitors []*monitor
}

func startMasters(t *testing.T, n int) *masterSet {
	t.Helper()
	ms := &masterSet{}
	for i := 0; i < n; i++ {
		s := startServer(t)
		c := redis.NewClient(&redis.Options{Addr: s.addr, ReadTimeout: time.Second, WriteTimeout: time.Second})
		h := &counter{n: make(map[string]int)}
		c.AddHook(h)
		a := redis.NewClient(&redis.Options{Addr: s.addr})
		t.Cleanup(func() { c.Close(); a.Close() })
		ms.servers = append(ms.servers, s)
		ms.clients = append(ms.clients, c)
		ms.hooks = append(ms.hooks, h)
		ms.admin = append(ms.admin, a)
		ms.monitors = append(ms.monitors, startMonitor(t, s.addr))
	}
	return ms
}

// lockClient returns a redlock.Client over the set's go-redis clients,
// closed when t ends.
func (ms *masterSet) lockClient(t *testing.T, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	c, err := New(ms.clients, append([]redlock.Option{redlock.WithTimeout(lockTimeout)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// count returns how many masters hold key (any type).
func (ms *masterSet) count(t *testing.T, key string) int {
	t.Helper()
	n := 0
	for _, a := range ms.admin {
		v, err := a.Exists(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		n += int(v)
	}
	return n
}

// holders returns how many masters hold key with value token.
func (ms *masterSet) holders(t *testing.T, key, token string) int {
	t.Helper()
	n := 0
	for _, a := range ms.admin {
		v, err := a.Get(context.Background(), key).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if v == token {
			n++
		}
	}
	return n
}

// commandCalls returns how many cmd commands master i got from its
// clients (not from scripts), as its MONITOR showed them.
func (ms *masterSet) commandCalls(t *testing.T, i int, cmd string) int {
	t.Helper()
	return ms.monitors[i].get(cmd)
}

// monitor counts, per name, the commands a master's MONITOR shows it got
// from clients; commands run by scripts (shown as "lua") are left out.
type monitor struct {
	conn net.Conn
	done chan struct{}
	counter
}

func startMonitor(t *testing.T, addr string) *monitor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	m := &monitor{conn: conn, done: make(chan struct{}), counter: counter{n: make(map[string]int)}}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("MONITOR: %q %v", line, err)
	}
	go func() {
		defer close(m.done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			// +1700000000.123456 [0 127.0.0.1:5555] "SET" "k" ...
			_, rest, ok := strings.Cut(line, " [")
			if !ok {
				continue
			}
			from, rest, _ := strings.Cut(rest, "] ")
			if strings.HasSuffix(from, " lua") {
				continue
			}
			f := strings.Fields(rest)
			if len(f) == 0 {
				continue
			}
			name := strings.ToLower(strings.Trim(f[0], `"`))
			if name == "script" && len(f) > 1 {
				name += "|" + strings.ToLower(strings.Trim(f[1], `"`))
			}
			m.mu.Lock()
			m.n[name]++
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close(); <-m.done })
	return m
}

// checkHooksSawEverything compares, on every master, the lock commands the
// go-redis hook counted with those the master ran.
func (ms *masterSet) checkHooksSawEverything(t *testing.T) {
	t.Helper()
	// MONITOR shows a command once it ran; the last ones may still be on
	// their way: wait (bounded) until the counts agree, then report.
	poll(5*time.Second, func() bool {
		for i := range ms.servers {
			for _, name := range []string{"set", "evalsha", "eval", "script|load"} {
				if ms.hooks[i].get(name) != ms.commandCalls(t, i, name) {
					return false
				}
			}
		}
		return true
	})
	for i := range ms.servers {
		total := 0
		for _, name := range []string{"set", "evalsha", "eval", "script|load"} {
			hooked, ran := ms.hooks[i].get(name), ms.commandCalls(t, i, name)
			if hooked != ran {
				t.Errorf("master %d: the hook saw %d %s, the master ran %d", i, hooked, name, ran)
			}
			total += ran
			t.Logf("master %d: %d %s", i, ran, name)
		}
		if total == 0 {
			t.Errorf("master %d ran no lock command", i)
		}
	}
}

// waitFor polls cond until it holds, failing t if it does not within
// 10 s: for state that settles asynchronously, never a fixed sleep.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitForWithin(t, 10*time.Second, what, cond)
}

// waitForWithin is waitFor with a bound of d.
func waitForWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(d, cond) {
		t.Fatalf("not within %v: %s", d, what)
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// expectWake checks that a waiter, on a fake clock whose backoff never
// fires, gets the lock once the holder releases: only a release notice,
// carried by a go-redis PubSub, can wake it.
func (ms *masterSet) expectWake(t *testing.T, keys []string,
	acquire func(c *redlock.Client) (release func(context.Context) error, err error), release func(context.Context) error) {
	t.Helper()
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	ms.expectWakeOn(t, ms.lockClient(t, withClock(fake)), fake, keys, acquire, release)
}

// expectWakeOn is expectWake with the waiter's client c, whose clock is
// fake.
func (ms *masterSet) expectWakeOn(t *testing.T, c *redlock.Client, fake *clock.Fake, keys []string,
	acquire func(c *redlock.Client) (release func(context.Context) error, err error), release func(context.Context) error) {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		rel, err := acquire(c)
		if err == nil {
			err = rel(context.Background())
		}
		got <- err
	}()
	waitFor(t, "the waiter subscribed on every master", func() bool {
		for _, a := range ms.admin {
			for _, k := range keys {
				ch := "quorumlock:released:" + k
				n, err := a.PubSubNumSub(context.Background(), ch).Result()
				if err != nil {
					t.Fatal(err)
				}
				if n[ch] != 1 {
					return false
				}
			}
		}
		return fake.Pending() >= 1
	})
	if err := release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not wake the waiter")
	}
}

func releaser(l *redlock.Lock, err error) (func(context.Context) error, error) {
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// Every lock kind and option through a redlock.Client on go-redis clients,
// on one master and on five; the go-redis hooks see every lock command.
func TestNew_everyKindOnRealMasters(t *testing.T) {
	for _, n := range []int{1, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			ms := startMasters(t, n)
			c := ms.lockClient(t)
			other := ms.lockClient(t)
			if c.Masters() != n || c.Quorum() != n/2+1 {
				t.Fatalf("Masters %d Quorum %d", c.Masters(), c.Quorum())
			}
			t.Run("plain", func(t *testing.T) { testPlain(t, ms, c, other) })
			t.Run("fenced", func(t *testing.T) { testFenced(t, c) })
			t.Run("reentrant", func(t *testing.T) { testReentrant(t, ms, c, other) })
			t.Run("fair", func(t *testing.T) { testFair(t, ms, c) })
			t.Run("read/write", func(t *testing.T) { testReadWrite(t, ms, c, other) })
			t.Run("multi-key", func(t *testing.T) { testMulti(t, ms, c, other) })
			t.Run("extend", func(t *testing.T) { testExtend(t, ms, c) })
			t.Run("auto-extend and Lost", func(t *testing.T) { testAutoExtend(t, ms, c) })
			t.Run("Do", func(t *testing.T) { testDo(t, ms, c, other) })
			t.Run("waiters woken by pub/sub", func(t *testing.T) { testWake(t, ms, c) })
			t.Run("hooks see every lock command", func(t *testing.T) { ms.checkHooksSawEverything(t) })
		})
	}
}

func testPlain(t *testing.T, ms *masterSet, c, other *redlock.Client) {
	ctx := ctxFor(t)
	l, err := c.Acquire(ctx, "plain", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// Acquire returns at a quorum; the others follow.
	waitFor(t, "every master holds the token", func() bool { return ms.holders(t, "plain", l.Token()) == len(ms.servers) })
	if _, err := other.TryAcquire(ctx, "plain"); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v, want ErrNotAcquired", err)
	}
	var qe *redlock.QuorumError
	if _, err := other.Acquire(ctx, "plain", redlock.WithWait(100*time.Millisecond)); !errors.As(err, &qe) {
		t.Fatalf("Acquire of a held key: %v, want a *QuorumError", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	waitFor(t, "no master holds the key", func() bool { return ms.count(t, "plain") == 0 })
	l2, err := other.TryAcquire(ctx, "plain")
	if err != nil {
		t.Fatalf("TryAcquire of a released key: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func testFenced(t *testing.T, c *redlock.Client) {
	ctx := ctxFor(t)
	var last uint64
	for i := 0; i < 3; i++ {
		l, err := c.Acquire(ctx, "fenced", redlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("acquisition %d: fence %d after %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func testReentrant(t *testing.T, ms *masterSet, c, other *redlock.Client) {
	ctx := ctxFor(t)
	r, err := c.NewReentrant("reentrant", "owner-a", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := r.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r.Count() != 2 {
		t.Fatalf("Count %d after two acquisitions", r.Count())
	}
	b, err := other.NewReentrant("reentrant", "owner-b", redlock.WithWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Acquire(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("another owner: %v, want ErrNotAcquired", err)
	}
	for i := 0; i < 2; i++ {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "no master holds the key", func() bool { return ms.count(t, "reentrant") == 0 })
	if err := b.Acquire(ctx); err != nil {
		t.Fatalf("another owner after the release: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func testFair(t *testing.T, ms *masterSet, c *redlock.Client) {
	ctx := ctxFor(t)
	l, err := c.Acquire(ctx, "fair", redlock.WithFair(), redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ms.expectWake(t, []string{"fair"}, func(w *redlock.Client) (func(context.Context) error, error) {
		return releaser(w.Acquire(ctx, "fair", redlock.WithFair(), redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour)))
	}, l.Release)
}

func testReadWrite(t *testing.T, ms *masterSet, c, other *redlock.Client) {
	ctx := ctxFor(t)
	r1, err := c.AcquireRead(ctx, "rw", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := other.AcquireRead(ctx, "rw", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	if _, err := other.AcquireWrite(ctx, "rw", redlock.WithWait(100*time.Millisecond)); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("a writer beside readers: %v, want ErrNotAcquired", err)
	}
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The last reader's release wakes the writer.
	ms.expectWake(t, []string{"rw"}, func(w *redlock.Client) (func(context.Context) error, error) {
		return releaser(w.AcquireWrite(ctx, "rw", redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour)))
	}, r2.Release)
}

func testMulti(t *testing.T, ms *masterSet, c, other *redlock.Client) {
	ctx := ctxFor(t)
	l, err := c.AcquireMulti(ctx, []string{"m1", "m2", "m3"}, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Keys()) != 3 {
		t.Fatalf("Keys %q", l.Keys())
	}
	// AcquireMulti returns at a quorum; the others follow. Had other's
	// attempts overtaken them on a master, they would be granted there and
	// m0 be on it until the rollback, which the check below may not wait
	// for; with the keys on every master, every master refuses.
	waitFor(t, "every master holds the keys", func() bool {
		for _, k := range l.Keys() {
			if ms.holders(t, k, l.Token()) != len(ms.servers) {
				return false
			}
		}
		return true
	})
	if _, err := other.TryAcquire(ctx, "m2"); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("one of a multi-key lock's keys: %v, want ErrNotAcquired", err)
	}
	if _, err := other.AcquireMulti(ctx, []string{"m0", "m3"}, redlock.WithWait(100*time.Millisecond)); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("an overlapping multi-key lock: %v, want ErrNotAcquired", err)
	}
	if n := ms.count(t, "m0"); n != 0 {
		t.Fatalf("a failed multi-key acquisition left m0 on %d masters", n)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "no master holds the keys", func() bool {
		return ms.count(t, "m1")+ms.count(t, "m2")+ms.count(t, "m3") == 0
	})
}

func testExtend(t *testing.T, ms *masterSet, c *redlock.Client) {
	ctx := ctxFor(t)
	l, err := c.Acquire(ctx, "extend", redlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if v := time.Until(l.Until()); v < 50*time.Second {
		t.Fatalf("validity %v after extending to a minute", v)
	}
	waitFor(t, "every master extended the key", func() bool {
		for _, a := range ms.admin {
			if a.PTTL(context.Background(), "extend").Val() < 50*time.Second {
				return false
			}
		}
		return true
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("Extend after Release: %v, want ErrNotHeld", err)
	}
}

func testAutoExtend(t *testing.T, ms *masterSet, c *redlock.Client) {
	ctx := ctxFor(t)
	l, err := c.Acquire(ctx, "auto", redlock.WithTTL(2*time.Second), redlock.WithAutoExtend(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	first := l.Until()
	time.Sleep(2500 * time.Millisecond) // the subject: the TTL it was taken with passes
	select {
	case <-l.Lost():
		t.Fatalf("lost while auto-extended: %v", l.Err())
	default:
	}
	if !l.Until().After(time.Now()) || !l.Until().After(first) || ms.count(t, "auto") == 0 {
		t.Fatalf("not extended: until %v (first %v), held on %d masters", l.Until(), first, ms.count(t, "auto"))
	}
	// Taken from under it on every master, the lock is lost at the next
	// extension. The masters are emptied one by one, and an extension
	// between two of them still finds a quorum and heals the ones emptied
	// before: they are emptied again until the lock is lost.
	waitForWithin(t, 5*time.Second, "Lost() closed after the key vanished from every master", func() bool {
		for _, a := range ms.admin {
			a.Del(context.Background(), "auto")
		}
		select {
		case <-l.Lost():
			return true
		default:
			return false
		}
	})
	if l.Err() == nil {
		t.Fatal("a lost lock's Err is nil")
	}
}

func testDo(t *testing.T, ms *masterSet, c, other *redlock.Client) {
	ctx := ctxFor(t)
	ran := false
	err := c.Do(ctx, "do", func(ctx context.Context) error {
		l, ok := redlock.LockFromContext(ctx)
		if !ok || l.Key() != "do" {
			return fmt.Errorf("LockFromContext: %v %v", l, ok)
		}
		if _, err := other.TryAcquire(ctx, "do"); !errors.Is(err, redlock.ErrNotAcquired) {
			return fmt.Errorf("TryAcquire while Do holds the key: %v", err)
		}
		ran = true
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("Do: %v (ran %v)", err, ran)
	}
	waitFor(t, "no master holds the key", func() bool { return ms.count(t, "do") == 0 })
}

func testWake(t *testing.T, ms *masterSet, c *redlock.Client) {
	ctx := ctxFor(t)
	l, err := c.Acquire(ctx, "wake", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ms.expectWake(t, []string{"wake"}, func(w *redlock.Client) (func(context.Context) error, error) {
		return releaser(w.Acquire(ctx, "wake", redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour)))
	}, l.Release)

	r, err := c.NewReentrant("wake-re", "a", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	ms.expectWake(t, []string{"wake-re"}, func(w *redlock.Client) (func(context.Context) error, error) {
		b, err := w.NewReentrant("wake-re", "b", redlock.WithTTL(time.Minute), redlock.WithWait(time.Hour))
		if err != nil {
			return nil, err
		}
		return b.Release, b.Acquire(ctx)
	}, r.Release)
}

// A frozen master (SIGSTOP), one of five, costs its vote and nothing
// else: acquisitions succeed on the four others within the per-master
// timeout, and once it thaws it votes again.
func TestNew_frozenMasterCostsOneVote(t *testing.T) {
	ms := startMasters(t, 5)
	c := ms.lockClient(t)
	ctx := ctxFor(t)
	ms.servers[2].stop()
	defer ms.servers[2].cont()
	live := func(key, token string) int {
		n := 0
		for i, a := range ms.admin {
			if i != 2 && a.Get(context.Background(), key).Val() == token {
				n++
			}
		}
		return n
	}
	for i := 0; i < 5; i++ {
		key := fmt.Sprintf("frozen%d", i)
		start := time.Now()
		l, err := c.Acquire(ctx, key, redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("%s with one master frozen: %v", key, err)
		}
		if d := time.Since(start); d > 2*lockTimeout {
			t.Errorf("%s took %v with one master frozen (per-master timeout %v)", key, d, lockTimeout)
		}
		waitFor(t, "the four live masters hold "+key, func() bool { return live(key, l.Token()) == 4 })
		// The release's answer from the frozen master never comes: the
		// quorum of the others frees the key.
		_ = l.Release(ctx)
		waitFor(t, "the four live masters freed "+key, func() bool { return live(key, l.Token()) == 0 })
	}
	ms.servers[2].cont()
	waitFor(t, "the thawed master votes again", func() bool {
		l, err := c.TryAcquire(ctx, "thawed", redlock.WithTTL(time.Minute))
		if err != nil {
			return false
		}
		defer l.Release(ctx)
		return poll(2*time.Second, func() bool {
			return ms.admin[2].Get(context.Background(), "thawed").Val() == l.Token()
		})
	})
}

// Close leaves no goroutine of the lock's and no connection of its own:
// the release-notice subscriptions are closed, and the go-redis clients,
// which stay the caller's, hold only their pools' connections.
func TestNew_closeLeavesNoGoroutineNorConnection(t *testing.T) {
	ms := startMasters(t, 3)
	for _, c := range ms.clients {
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	leak := goleak.IgnoreCurrent()
	c, err := New(ms.clients, redlock.WithTimeout(lockTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	l, err := c.Acquire(ctx, "k", redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waiter := make(chan error, 1)
	go func() {
		w, err := c.Acquire(ctx, "k", redlock.WithWait(time.Hour))
		if err == nil {
			err = w.Release(ctx)
		}
		waiter <- err
	}()
	pubsubConns := func(i int) int {
		list := ms.admin[i].ClientList(context.Background()).Val()
		return strings.Count(list, "flags=P")
	}
	waitFor(t, "the waiter subscribed on every master", func() bool {
		for i := range ms.admin {
			if pubsubConns(i) != 1 {
				return false
			}
		}
		return true
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waiter; err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range ms.admin {
		if n := pubsubConns(i); n != 0 {
			t.Errorf("master %d: %d subscriber connections after Close", i, n)
		}
		if err := ms.clients[i].Ping(context.Background()).Err(); err != nil {
			t.Errorf("master %d: the caller's go-redis client no longer works after Close: %v", i, err)
		}
	}
	goleak.VerifyNone(t, leak)
	for _, rc := range ms.clients {
		rc.Close()
	}
	// Left: the test's own connection and its MONITOR.
	for i, a := range ms.admin {
		if n := strings.Count(a.ClientList(context.Background()).Val(), "\n"); n != 2 {
			t.Errorf("master %d: %d connections once the go-redis clients are closed, want 2 (the test's): %s", i, n,
				a.ClientList(context.Background()).Val())
		}
	}
}

func TestNew_refusesWhatCannotBeAQuorum(t *testing.T) {
	s := startServer(t)
	a := redis.NewClient(&redis.Options{Addr: s.addr})
	b := redis.NewClient(&redis.Options{Addr: s.addr})
	defer a.Close()
	defer b.Close()
	var nilClient *redis.Client
	for name, clients := range map[string][]redis.UniversalClient{
		"none":           nil,
		"nil":            {a, nil},
		"nil pointer":    {nilClient},
		"the same twice": {a, b},
	} {
		c, err := New(clients)
		if !errors.Is(err, redlock.ErrInvalid) || c != nil {
			t.Errorf("%s: %v, want an error matching redlock.ErrInvalid", name, err)
		}
	}
}
