package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// Hostile and odd input, each with the outcome it must have: a clear
// error naming the problem (and nothing left on any master), or plain
// correct behaviour.

func TestHostileInput_rejectedWithClearErrors(t *testing.T) {
	rs := startReal(t, 3)
	c := rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	var nilCtx context.Context
	var zero redlock.Lock
	var nilLock *redlock.Lock
	var zeroRe redlock.Reentrant
	acq := func(ctx context.Context, key string, opts ...redlock.LockOption) error {
		l, err := c.Acquire(ctx, key, opts...)
		if err == nil {
			_ = l.Release(context.Background())
		}
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		is   error
		says string
	}{
		{"empty key", acq(ctx, ""), redlock.ErrInvalid, "empty key"},
		{"TTL 0", acq(ctx, "k", redlock.WithTTL(0)), redlock.ErrInvalid, "TTL must be at least 1ms"},
		{"negative TTL", acq(ctx, "k", redlock.WithTTL(-time.Second)), redlock.ErrInvalid, "TTL must be at least 1ms"},
		{"absurd TTL", acq(ctx, "k", redlock.WithTTL(1<<62)), redlock.ErrInvalid, "longer than the maximum"},
		{"TTL below the timeout", acq(ctx, "k", redlock.WithTTL(100*time.Millisecond)), redlock.ErrInvalid, "leaves no validity"},
		{"negative wait", acq(ctx, "k", redlock.WithWait(-1)), redlock.ErrInvalid, "wait must not be negative"},
		{"bad backoff", acq(ctx, "k", redlock.WithBackoff(10, 5)), redlock.ErrInvalid, "backoff"},
		{"nil ctx", acq(nilCtx, "k"), redlock.ErrInvalid, "nil context"},
		{"cancelled ctx", acq(cancelled, "k"), context.Canceled, ""},
		{"zero Lock release", zero.Release(ctx), redlock.ErrInvalid, "not returned by an acquisition"},
		{"nil Lock extend", nilLock.Extend(ctx, time.Second), redlock.ErrInvalid, "not returned by an acquisition"},
		{"zero Reentrant", zeroRe.Acquire(ctx), redlock.ErrInvalid, "not made by Client.NewReentrant"},
		{"zero Lock's Err", zero.Err(), redlock.ErrInvalid, "not returned by an acquisition"},
		{"nil Lock's Err", nilLock.Err(), redlock.ErrInvalid, "not returned by an acquisition"},
		{"nil fn", c.Do(ctx, "k", nil), redlock.ErrInvalid, "nil function"},
		{"multi: no keys", func() error { _, err := c.AcquireMulti(ctx, nil); return err }(), redlock.ErrInvalid, "no keys"},
		{"fair multi", func() error { _, err := c.AcquireMulti(ctx, []string{"a"}, redlock.WithFair()); return err }(), redlock.ErrInvalid, "WithFair"},
		{"untaggable key, fenced, cluster", func() error {
			_, err := rs.client(t, pipelinedPath, redlock.WithClusterSlots()).Acquire(ctx, "a}b", redlock.WithFencing())
			return err
		}(), redlock.ErrInvalid, "cannot share its Redis Cluster slot"},
	} {
		if !errors.Is(tc.err, tc.is) {
			t.Errorf("%s: err = %v, want %v", tc.name, tc.err, tc.is)
			continue
		}
		if !strings.Contains(tc.err.Error(), tc.says) {
			t.Errorf("%s: %q does not say %q", tc.name, tc.err, tc.says)
		}
	}
	for i, s := range rs.servers {
		if n, _ := s.Do("DBSIZE"); n.(int64) != 0 {
			t.Errorf("master %d holds %d keys after bad input", i, n)
		}
	}
	// A Lock no acquisition returned is lost from the start.
	for _, l := range []*redlock.Lock{&zero, nilLock} {
		select {
		case <-l.Lost():
		default:
			t.Error("Lost() of a Lock no acquisition returned is not closed")
		}
	}

	// Bad client settings.
	for name, f := range map[string]func() (*redlock.Client, error){
		"no masters": func() (*redlock.Client, error) { return redigo.New(nil) },
		"nil pool":   func() (*redlock.Client, error) { return redigo.New([]pool.Pool{rs.pools[0], nil}) },
		"duplicate masters": func() (*redlock.Client, error) {
			return redigo.New([]pool.Pool{rs.pools[0], rs.pools[1], rs.pools[0]})
		},
		"zero timeout": func() (*redlock.Client, error) { return redigo.New(rs.pools, redlock.WithTimeout(0)) },
		"drift 1":      func() (*redlock.Client, error) { return redigo.New(rs.pools, redlock.WithDriftFactor(1)) },
		"bad URL":      func() (*redlock.Client, error) { return redigo.NewFromAddrs([]string{"redis://h:99999"}) },
	} {
		if _, err := f(); err == nil || (!errors.Is(err, redlock.ErrInvalid) && !errors.Is(err, pool.ErrBadURL)) {
			t.Errorf("%s: err = %v, want ErrInvalid or ErrBadURL", name, err)
		}
	}
}

func TestHostileInput_oddKeysJustWork(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			rs := startReal(t, n)
			c := rs.client(t, path)
			ctx := ctxT(t)
			for _, key := range []string{
				strings.Repeat("k", 100_000),
				"\x00\xff\xfe binary",
				"not utf-8 \xc3\x28",
				"{tag}:with braces",
				"}{ backwards",
				"spaces and\ttabs\nand newlines",
				"quorumlock:released:looks-like-a-channel",
			} {
				l, err := c.Acquire(ctx, key, redlock.WithFencing())
				if err != nil {
					t.Fatalf("key %.40q: %v", key, err)
				}
				if got := rs.values(t, key); count(got, l.Token()) < n/2+1 {
					t.Fatalf("key %.40q not held on a quorum", key)
				}
				if err := l.Extend(ctx, 5*time.Second); err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	})
}

func TestHostileInput_concurrentReleaseAndExtend(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		c := rs.client(t, path)
		ctx := ctxT(t)
		for i := 0; i < 20; i++ {
			l, err := c.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for j := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if j%2 == 0 {
						errs[j] = l.Release(ctx)
					} else {
						errs[j] = l.Extend(ctx, 5*time.Second)
					}
				}()
			}
			wg.Wait()
			released := 0
			for j, err := range errs {
				switch {
				case j%2 == 0 && err == nil:
					released++
				case err != nil && !errors.Is(err, redlock.ErrNotHeld):
					t.Fatalf("call %d: %v", j, err)
				}
			}
			if released != 1 {
				t.Fatalf("%d releases succeeded, want exactly 1", released)
			}
			waitUntil(t, "the key is gone", func() bool { return rs.exists(t, "k") == 0 })
		}
	})
}

// Masters that answer what a lock master never should: each counts as a
// failed master, with an error that says what it answered, and a quorum
// of good masters still decides.
func TestHostileInput_unexpectedReplies(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		good := redistest.Start(t, 2)
		primary := redistest.StartOne(t)
		replica := redistest.StartOne(t, redistest.WithConfig("replicaof", "127.0.0.1", strings.Split(primary.Addr(), ":")[1]))
		full := redistest.StartOne(t, redistest.WithConfig("maxmemory", "1"))
		proxy := hostile.Start(t, hostile.Reply("+PONG\r\n")) // answers +PONG to everything
		ctx := ctxT(t)
		for name, bad := range map[string]string{
			"replica": replica.Addr(), "full master": full.Addr(), "proxy": proxy,
		} {
			addrs := []string{good[0].Addr(), good[1].Addr(), bad}
			l, err := addrClient(t, path, addrs).Acquire(ctx, "k")
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("%s: release: %v", name, err)
			}
			// With only the bad master and one good one, no quorum: the
			// error names what the bad one said.
			_, err = addrClient(t, path, []string{good[0].Addr(), bad}).TryAcquire(ctx, "k2")
			want := map[string]string{"replica": "READONLY", "full master": "OOM", "proxy": "unexpected reply"}[name]
			if !errors.Is(err, redlock.ErrNotAcquired) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), bad) {
				t.Errorf("%s: err = %v, want %q naming %s", name, err, want, bad)
			}
		}
		// A key of the wrong type: a reentrant lock on a key that holds a
		// plain lock is a script error, explained: which kinds hold such a key.
		rs := startReal(t, 1)
		c := rs.client(t, path)
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		re, _ := c.NewReentrant("k", "me", redlock.WithWait(0))
		if err := re.Acquire(ctx); !errors.Is(err, redlock.ErrWrongKind) || !strings.Contains(err.Error(), "held by a plain, fair, fenced or multi-key lock") {
			t.Errorf("reentrant on a plain lock's key: %v", err)
		}
	})
}
