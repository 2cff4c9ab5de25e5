// Package conformance is the conformance suite of quorumlock: every
// public operation of a redlock.Client on N = 1, 3, 5 and 7 real masters,
// run for any way of making a client — the two redigo paths (from package
// integration's tests), the go-redis adapter (from module goredis's
// tests), or a Transport of your own.
//
// Run starts the masters (package cluster: Docker or redis-server
// processes) and runs every case; Cases runs them on masters the caller
// started. The cases need a client per call of NewClient, for the masters
// at addrs, with the options given (the suite's per-master timeout).
package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/election"
	"github.com/quorumlock/quorumlock/integration/cluster"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// NewClient returns a new redlock.Client for the masters at addrs, in that
// order, made with opts. The suite closes it, and NewClient should also
// close it (and what it made for it) in t.Cleanup: Close is idempotent.
type NewClient func(t *testing.T, addrs []string, opts ...redlock.Option) *redlock.Client

// Timeout is the per-master timeout the suite gives its clients: generous,
// as the suites run under -race on two cores beside a Docker engine.
const Timeout = 300 * time.Millisecond

// Run runs the suite on every backend (cluster.ForEachBackend) and on
// N = 1, 3, 5 and 7 masters, for clients made by newClient.
func Run(t *testing.T, newClient NewClient) {
	cluster.ForEachBackend(t, func(t *testing.T, b cluster.Backend) {
		for _, n := range []int{1, 3, 5, 7} {
			t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
				Cases(t, cluster.Start(t, n, cluster.WithBackend(b)), newClient)
			})
		}
	})
}

// Cases runs every case of the suite as a subtest, on c's masters, for
// clients made by newClient. The cases use keys named after themselves
// and leave every master as they found it.
func Cases(t *testing.T, c *cluster.Cluster, newClient NewClient) {
	t.Run("lifecycle", func(t *testing.T) { lifecycle(t, c, newClient) })
	t.Run("second acquirer is refused", func(t *testing.T) { exclusion(t, c, newClient) })
	t.Run("foreign token cannot release or extend", func(t *testing.T) { foreign(t, c, newClient) })
	t.Run("vanished holder frees the key at its TTL", func(t *testing.T) { vanished(t, c, newClient) })
	t.Run("failed acquire leaves no key", func(t *testing.T) { noLeftovers(t, c, newClient) })
	t.Run("a closed client reads and observes no more", func(t *testing.T) { closedClient(t, c, newClient) })
	t.Run("a multi-key lock names its holder on every key", func(t *testing.T) { multiKeyMetadata(t, c, newClient) })
	t.Run("a semaphore grants at most k permits", func(t *testing.T) { semaphore(t, c, newClient) })
}

// open makes a client of c's masters with the suite's per-master timeout,
// closed when t ends.
func open(t *testing.T, newClient NewClient, c *cluster.Cluster) *redlock.Client {
	t.Helper()
	client := newClient(t, c.Addrs(), redlock.WithTimeout(Timeout))
	if client == nil {
		t.Fatal("conformance: NewClient returned nil")
	}
	t.Cleanup(func() { client.Close() })
	return client
}

func lifecycle(t *testing.T, c *cluster.Cluster, newClient NewClient) {
	n := len(c.Masters)
	client := open(t, newClient, c)
	ctx := ctxT(t)
	k := key(t)
	l, err := client.Acquire(ctx, k, redlock.WithTTL(3*time.Second))
	must(t, err)
	if v := time.Until(l.Until()); v <= 0 || v > 3*time.Second {
		t.Errorf("validity %v from a 3s TTL", v)
	}
	extend(t, l, 20*time.Second)
	if v := time.Until(l.Until()); v < 19*time.Second {
		t.Errorf("validity %v after extending to 20s", v)
	}
	holdEverywhere(t, c, l, 20*time.Second)
	// Extend returns at a quorum; the last master's answer may come later.
	for i, m := range c.Masters {
		deadline := time.Now().Add(5 * time.Second)
		for {
			pttl, err := redis.Int64(m.Do("PTTL", k))
			if err == nil && pttl >= 15000 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("master %d: PTTL %v, %v 5s after extending to 20s", i, pttl, err)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	must(t, l.Release(ctx))
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("second Release: %v, want ErrNotHeld", err)
	}
	client.Close() // every master has answered the release
	if got := Count(Holders(c, k), ""); got != n {
		t.Errorf("after release %d of %d masters are free: %q", got, n, Holders(c, k))
	}
}

func exclusion(t *testing.T, c *cluster.Cluster, newClient NewClient) {
	a, b := open(t, newClient, c), open(t, newClient, c)
	ctx := ctxT(t)
	k := key(t)
	l, err := a.Acquire(ctx, k)
	must(t, err)
	// b's first contact with its masters (dials, script loads) can outlast
	// the per-master timeout on a busy host: it takes and gives back a key
	// of its own first, with retries, so that its one attempt below is
	// refused for the lock, not for that.
	w, err := b.Acquire(ctx, k+":warm", redlock.WithWait(10*time.Second))
	must(t, err)
	doneWith(t, w.Release(ctx))
	_, err = b.TryAcquire(ctx, k)
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.As(err, &qe) {
		t.Fatalf("second acquirer: %v", err)
	}
	if qe.Succeeded >= qe.Quorum || qe.Failed != nil {
		t.Errorf("second acquirer: %+v", qe)
	}
	_, err = b.Acquire(ctx, k, redlock.WithWait(200*time.Millisecond))
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("second acquirer with a wait: %v", err)
	}
	must(t, l.Release(ctx))
	l2, err := b.Acquire(ctx, k, redlock.WithWait(5*time.Second))
	must(t, err)
	must(t, l2.Release(ctx))
}

func foreign(t *testing.T, c *cluster.Cluster, newClient NewClient) {
	n := len(c.Masters)
	client := open(t, newClient, c)
	ctx := ctxT(t)
	k := key(t)
	l, err := client.Acquire(ctx, k, redlock.WithTTL(10*time.Second))
	must(t, err)
	holdEverywhere(t, c, l, 10*time.Second)
	for _, m := range c.Masters {
		_, err := m.Do("SET", k, "foreign", "PX", 60000)
		must(t, err)
	}
	if err := l.Extend(ctx, 10*time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Errorf("Extend over a foreign token: %v, want ErrLockLost", err)
	}
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("Release over a foreign token: %v, want ErrNotHeld", err)
	}
	client.Close()
	if got := Count(Holders(c, k), "foreign"); got != n {
		t.Errorf("the foreign holder's key survives on %d of %d masters", got, n)
	}
}

func vanished(t *testing.T, c *cluster.Cluster, newClient NewClient) {
	a, b := open(t, newClient, c), open(t, newClient, c)
	ctx := ctxT(t)
	k := key(t)
	_, err := a.Acquire(ctx, k, redlock.WithTTL(time.Second))
	must(t, err)
	a.Close() // the holder vanishes without releasing
	start := time.Now()
	l, err := b.Acquire(ctx, k, redlock.WithTTL(time.Second), redlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("a vanished holder's lock never freed: %v", err)
	}
	if el := time.Since(start); el < 500*time.Millisecond {
		t.Errorf("acquired after %v, before the vanished holder's TTL ran out", el)
	}
	doneWith(t, l.Release(ctx))
}

func noLeftovers(t *testing.T, c *cluster.Cluster, newClient NewClient) {
	n := len(c.Masters)
	q := n/2 + 1
	k := key(t)
	// Another holder owns the key on a bare quorum; our attempts are
	// granted on the rest and must be undone there.
	for i := 0; i < q; i++ {
		_, err := c.Masters[i].Do("SET", k, "other", "PX", 60000)
		must(t, err)
	}
	client := open(t, newClient, c)
	for i := 0; i < 10; i++ {
		if _, err := client.TryAcquire(context.Background(), k); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	// Also attempts cut short by the caller's deadline.
	for i := 0; i < 10; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i*50)*time.Microsecond)
		_, err := client.TryAcquire(ctx, k)
		cancel()
		if !errors.Is(err, redlock.ErrNotAcquired) {
			t.Fatalf("cut-short attempt %d: %v", i, err)
		}
	}
	client.Close()
	vals := Holders(c, k)
	if Count(vals, "other") != q || Count(vals, "") != n-q {
		t.Errorf("after failed attempts the masters hold %q", vals)
	}
}

// closedClient: once a client is closed, its Done channel is closed, the
// Observe of its election ends without reporting a leader elected after
// the Close, and Leader and Inspect return ErrClosed, though the masters
// still answer other clients.
func closedClient(t *testing.T, c *cluster.Cluster, newClient NewClient) {
	ctx := ctxT(t)
	k := key(t)
	watcher, candidates := open(t, newClient, c), open(t, newClient, c)
	we, err := election.New(watcher, k, election.WithTTL(2*time.Second))
	must(t, err)
	ce, err := election.New(candidates, k, election.WithTTL(2*time.Second))
	must(t, err)
	seen := we.Observe(context.Background())
	first, err := ce.Campaign(ctx, "before-close")
	must(t, err)
	if ld, ok := nextLeader(t, seen); !ok || ld.Term != first.Term() {
		t.Fatalf("observed %+v (open %v), want term %d", ld, ok, first.Term())
	}
	must(t, watcher.Close())
	select {
	case <-watcher.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if _, err := we.Leader(ctx); !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("Leader on a closed client: %v, want ErrClosed", err)
	}
	if _, err := watcher.Inspect(ctx, k); !errors.Is(err, redlock.ErrClosed) {
		t.Errorf("Inspect on a closed client: %v, want ErrClosed", err)
	}
	doneWith(t, first.Resign(ctx))
	second, err := ce.Campaign(ctx, "after-close")
	must(t, err)
	for {
		ld, ok := nextLeader(t, seen)
		if !ok {
			break
		}
		if ld.Term > first.Term() {
			t.Fatalf("the observer of a closed client reported a leader elected after Close: %+v", ld)
		}
	}
	must(t, second.Resign(ctx))
	deleteKeys(t, c, layout.FenceKey(k))
}

// nextLeader receives from an Observe channel within 10 s; ok false when
// it closed.
func nextLeader(t *testing.T, ch <-chan election.Leader) (election.Leader, bool) {
	t.Helper()
	tm := time.NewTimer(10 * time.Second)
	defer tm.Stop()
	select {
	case ld, ok := <-ch:
		return ld, ok
	case <-tm.C:
		t.Fatal("Observe sent nothing and stayed open for 10s")
	}
	return election.Leader{}, false
}

// multiKeyMetadata: a multi-key lock's holder metadata is with each of its
// keys, so Inspect of any key names the holder on every master that holds
// it; the release leaves none of it behind.
func multiKeyMetadata(t *testing.T, c *cluster.Cluster, newClient NewClient) {
	client := open(t, newClient, c)
	ctx := ctxT(t)
	k := key(t)
	ks := []string{"{" + k + "}:a", "{" + k + "}:b", "{" + k + "}:c"}
	l, err := client.AcquireMulti(ctx, ks, redlock.WithTTL(5*time.Second), redlock.WithMetadata("host=a pid=7"))
	must(t, err)
	for _, key := range ks {
		waitHolders(t, c, key, l.Token(), len(c.Masters))
		in, err := client.Inspect(ctx, key)
		must(t, err)
		for i, m := range in.Masters {
			if m.Err != nil || len(m.State.Holders) != 1 || m.State.Holders[0].Meta != "host=a pid=7" {
				t.Errorf("Inspect of %s, master %d: %+v, %v; want the holder's metadata", key, i, m.State.Holders, m.Err)
			}
		}
	}
	must(t, l.Release(ctx))
	var left []string
	for _, key := range ks {
		left = append(left, key, layout.MetaKey(key))
	}
	// The release returns at a quorum: the last masters delete a moment
	// later.
	remaining := func() (out []string) {
		for i, m := range c.Masters {
			for _, key := range left {
				if n, err := redis.Int(m.Do("EXISTS", key)); err != nil || n != 0 {
					out = append(out, fmt.Sprintf("master %d: %s (%d, %v)", i, key, n, err))
				}
			}
		}
		return out
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(remaining()) > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if r := remaining(); len(r) > 0 {
		t.Errorf("left after the release: %q", r)
	}
}

// deleteKeys deletes keys on every master of c.
func deleteKeys(t *testing.T, c *cluster.Cluster, keys ...string) {
	t.Helper()
	for i, m := range c.Masters {
		for _, k := range keys {
			if _, err := m.Do("DEL", k); err != nil {
				t.Errorf("master %d: DEL %s: %v", i, k, err)
			}
		}
	}
}

// waitHolders waits until want masters hold token at key: the masters not
// needed for a quorum answer a moment after the call returns.
func waitHolders(t *testing.T, c *cluster.Cluster, key, token string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for Count(Holders(c, key), token) < want {
		if time.Now().After(deadline) {
			t.Fatalf("masters hold %q, want %q on %d", Holders(c, key), token, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// holdEverywhere waits, for at most 5 s, until every master of c holds
// l's token. An acquisition or an extension returns at a quorum, and a
// master that missed its command (a busy host's timeout) is not asked
// again by it: the next extension puts the lock back on each master that
// answers that it lacks it (a lock that heals). So while some master
// lacks it, l is extended to ttl every per-master timeout.
func holdEverywhere(t *testing.T, c *cluster.Cluster, l *redlock.Lock, ttl time.Duration) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	next := time.Now().Add(Timeout)
	for Count(Holders(c, l.Key()), l.Token()) < len(c.Masters) {
		if time.Now().After(deadline) {
			t.Fatalf("masters hold %q, want %q on %d", Holders(c, l.Key()), l.Token(), len(c.Masters))
		}
		if time.Now().After(next) {
			if err := l.Extend(ctxT(t), ttl); err != nil {
				t.Logf("extension to put the lock back fell short: %v", err)
			}
			next = time.Now().Add(Timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Holders returns, per master of c, the value at key ("" when absent, "?"
// when the master is down, partitioned or cannot be asked).
func Holders(c *cluster.Cluster, key string) []string {
	vals := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		if _, down, part := m.State(); down || part {
			vals[i] = "?"
			continue
		}
		v, err := redis.String(m.Do("GET", key))
		switch {
		case errors.Is(err, redis.ErrNil):
		case err != nil:
			vals[i] = "?"
		default:
			vals[i] = v
		}
	}
	return vals
}

// Count returns how many of vals equal want.
func Count(vals []string, want string) int {
	n := 0
	for _, v := range vals {
		if v == want {
			n++
		}
	}
	return n
}

// extend extends l to ttl, trying again (up to five times) where a round
// fell short of a quorum while validity was left (ErrNotExtended: the
// lock is still held, and a holder tries again — on a loaded machine a
// round's masters can miss the per-master timeout).
func extend(t *testing.T, l *redlock.Lock, ttl time.Duration) {
	t.Helper()
	ctx := ctxT(t)
	var err error
	// Masters that did not answer in time are taken for down for a while
	// and not asked: each try waits a per-master timeout after the last,
	// while the lock is still valid.
	for try := 0; try < 10; try++ {
		if err = l.Extend(ctx, ttl); !errors.Is(err, redlock.ErrNotExtended) || time.Now().After(l.Until()) {
			break
		}
		t.Logf("extension %d fell short, trying again: %v", try+1, err)
		select {
		case <-ctx.Done():
		case <-time.After(Timeout):
		}
	}
	must(t, err)
}

// doneWith checks the release of a lock the test no longer needs, where
// the release is not the subject. A master that did not answer it in time
// (a busy host) leaves the key to the client's background retries and to
// its TTL: logged, not failed. Any other error fails the test.
func doneWith(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, redlock.ErrNotReleased) && errors.Is(err, redlock.ErrMasterTimeout) {
		t.Logf("release not confirmed in time, left to retries and the TTL: %v", err)
		return
	}
	must(t, err)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// ctxT is a context for one test's calls, generously bounded for a busy
// machine, ended with the test.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func key(t *testing.T) string { return fmt.Sprintf("lock:%s", t.Name()) }
