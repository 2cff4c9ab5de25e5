package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// TLS, ACL users and credentials, against real masters.

func TestSecurity_TLSMasters(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		certs := redistest.NewCerts(t)
		servers := redistest.Start(t, 3, redistest.WithTLS(certs, true))
		var urls []string
		for _, s := range servers {
			urls = append(urls, "rediss://"+s.Addr())
		}
		cfg, err := pool.TLSFiles(certs.CAFile, certs.CertFile, certs.KeyFile, "")
		if err != nil {
			t.Fatal(err)
		}
		c := addrClient(t, path, urls, redigo.WithPoolOptions(pool.WithTLS(cfg)))
		ctx := ctxT(t)
		l, err := c.Acquire(ctx, "k", redlock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Extend(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		// A waiter on the same client waits over TLS too (pub/sub).
		got := make(chan error, 1)
		go func() {
			l2, err := c.Acquire(ctx, "k", redlock.WithWait(10*time.Second))
			if err == nil {
				err = l2.Release(ctx)
			}
			got <- err
		}()
		waitUntil(t, "the waiter subscribed on every master", func() bool {
			for _, s := range servers {
				vals, err := redis.Values(s.Do("PUBSUB", "NUMSUB", "quorumlock:released:k"))
				if err != nil || len(vals) != 2 {
					return false
				}
				if n, _ := redis.Int(vals[1], nil); n != 1 {
					return false
				}
			}
			return true
		})
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}

		// The wrong CA: every master fails, and the error says why.
		badCfg, err := pool.TLSFiles(certs.OtherCAFile, certs.CertFile, certs.KeyFile, "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = addrClient(t, path, urls, redigo.WithPoolOptions(pool.WithTLS(badCfg))).TryAcquire(ctx, "k")
		var qe *redlock.QuorumError
		if !errors.As(err, &qe) || qe.Succeeded != 0 || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
			t.Fatalf("wrong CA: %v", err)
		}
	})
}

// MinimalACL is the ACL rule set docs/operations.md gives a lock user,
// for keys starting with lock: (the test checks it works for every lock
// kind and option).
const minimalACL = `on >lock-user-secret resetkeys ~lock:* ~{lock:* resetchannels &quorumlock:released:lock:* -@all ` +
	`+ping +set +get +del +exists +pexpire +pexpireat +publish +time +hset +hget +hdel +hexists +hgetall ` +
	`+zadd +zrem +zrange +zrangebyscore +evalsha +eval +script|load +subscribe +unsubscribe`

func aclUser(t *testing.T, servers []*redistest.Server, name, rules string) []string {
	t.Helper()
	var urls []string
	for _, s := range servers {
		args := []any{"SETUSER", name, "reset"}
		for _, r := range strings.Fields(rules) {
			args = append(args, r)
		}
		if _, err := s.Do("ACL", args...); err != nil {
			t.Fatalf("ACL SETUSER %s: %v", rules, err)
		}
		pw := ""
		for _, r := range strings.Fields(rules) {
			if strings.HasPrefix(r, ">") {
				pw = r[1:]
			}
		}
		urls = append(urls, fmt.Sprintf("redis://%s:%s@%s", name, pw, s.Addr()))
	}
	return urls
}

func TestSecurity_minimalACLIsEnoughForEveryKind(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		forN1N5(t, func(t *testing.T, n int) {
			servers := redistest.Start(t, n)
			urls := aclUser(t, servers, "locker", minimalACL)
			c := addrClient(t, path, urls)
			var settled atomic.Int64 // pauses begun by c's waiters after their latest attempt
			redlock.SetSettled(c, func() { settled.Add(1) })
			ctx := ctxT(t)
			step := func(what string, err error) {
				t.Helper()
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
			for _, o := range [][]redlock.LockOption{nil, {redlock.WithFencing()}, {redlock.WithFair()}} {
				l, err := c.Acquire(ctx, "lock:a", o...)
				step("acquire", err)
				step("extend", l.Extend(ctx, 5*time.Second))
				// A second acquirer waits (pub/sub) and is woken.
				got := make(chan error, 1)
				before := settled.Load()
				go func() {
					l2, err := c.Acquire(ctx, "lock:a", append(o, redlock.WithWait(10*time.Second))...)
					if err == nil {
						err = l2.Release(ctx)
					}
					got <- err
				}()
				// It waits for the release: refused, it began a pause with
				// its latest attempt over (redlock.SetSettled); or it
				// returned, which the step below reports.
				waitUntil(t, "the second acquirer waits", func() bool { return settled.Load() > before || len(got) > 0 })
				step("release", l.Release(ctx))
				step("waiter", <-got)
			}
			rl, err := c.NewReentrant("lock:r", "me")
			step("reentrant", err)
			step("reentrant acquire", rl.Acquire(ctx))
			step("reentrant again", rl.Acquire(ctx))
			step("reentrant release", rl.Release(ctx))
			step("reentrant release", rl.Release(ctx))
			r, err := c.AcquireRead(ctx, "lock:rw")
			step("read", err)
			step("read release", r.Release(ctx))
			w, err := c.AcquireWrite(ctx, "lock:rw")
			step("write", err)
			step("write release", w.Release(ctx))
			m, err := c.AcquireMulti(ctx, []string{"lock:m1", "lock:m2"})
			step("multi", err)
			step("multi release", m.Release(ctx))
			// Two fair waiters behind a holder whose key expires; the
			// first gives up while it heads the queue, and its leave
			// announces the free key to the second.
			_, err = c.TryAcquire(ctx, "lock:f", redlock.WithTTL(700*time.Millisecond))
			step("holder", err)
			fair := []redlock.LockOption{redlock.WithFair(), redlock.WithBackoff(time.Minute, time.Minute)}
			firstCtx, giveUp := context.WithTimeout(ctx, 1200*time.Millisecond)
			defer giveUp()
			first := make(chan error, 1)
			go func() { _, err := c.Acquire(firstCtx, "lock:f", fair...); first <- err }()
			redistest.Eventually(t, 5*time.Second, "the first fair waiter queued", func() bool {
				n, err := redis.Int(servers[0].Do("ZCARD", layout.QueueKey("lock:f")))
				return err == nil && n == 1
			})
			second := make(chan error, 1)
			go func() {
				l, err := c.Acquire(ctx, "lock:f", fair...)
				if err == nil {
					err = l.Release(ctx)
				}
				second <- err
			}()
			if err := <-first; !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("the first fair waiter: %v, want it to give up", err)
			}
			select {
			case err := <-second:
				step("second fair waiter", err)
			case <-time.After(10 * time.Second):
				t.Fatal("the second fair waiter was not woken by the first's leave")
			}
			// The release script leaves its notice's count out rather
			// than run PUBSUB without the right: no such refusal is
			// logged (the identity probe's INFO is, and is expected).
			for i, s := range servers {
				entries, err := redis.Values(s.Do("ACL", "LOG"))
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range entries {
					fields, _ := redis.Values(e, nil)
					object := ""
					for j := 0; j+1 < len(fields); j += 2 {
						if k, _ := redis.String(fields[j], nil); k == "object" {
							object, _ = redis.String(fields[j+1], nil)
						}
					}
					if object != "info" {
						t.Errorf("master %d: ACL LOG has a refusal of %q", i, object)
					}
				}
			}
		})
	})
}

func TestSecurity_ACLRefusalNamesTheCommand(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		servers := redistest.Start(t, 3)
		ctx := ctxT(t)
		for _, tc := range []struct{ drop, cmd, want string }{
			{"+set", "set", "NOPERM this user has no permissions to run the 'set' command"},
			{"+publish", "publish", "the release script runs PUBLISH there: the ACL user needs +publish"},
		} {
			urls := aclUser(t, servers, "limited", strings.Replace(minimalACL, " "+tc.drop+" ", " ", 1))
			l, err := addrClient(t, path, urls).TryAcquire(ctx, "lock:x")
			if tc.cmd == "publish" && err == nil {
				err = l.Release(ctx) // the release script publishes
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("without %s: err = %v, want %q", tc.drop, err, tc.want)
			}
		}
		// Keys outside the user's patterns are refused too, by name.
		urls := aclUser(t, servers, "locker", minimalACL)
		if _, err := addrClient(t, path, urls).TryAcquire(ctx, "other:x"); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("a key outside ~lock:*: %v", err)
		}
	})
}

func TestSecurity_credentialsNeverShow(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		const secret = "hunter2-very-secret"
		servers := redistest.Start(t, 3)
		for _, s := range servers {
			if _, err := s.Do("ACL", "SETUSER", "app", "on", ">"+secret, "~*", "&*", "+@all"); err != nil {
				t.Fatal(err)
			}
		}
		var logs syncBuffer
		logger := slog.New(slog.NewTextHandler(&logs, nil))
		check := func(what, s string) {
			t.Helper()
			if strings.Contains(s, secret) || strings.Contains(s, "wrong-"+secret) {
				t.Errorf("%s shows the password: %s", what, s)
			}
		}
		// A wrong password: every master fails, and neither the error nor
		// the log shows either password.
		var wrongURLs, goodURLs []string
		for _, s := range servers {
			wrongURLs = append(wrongURLs, "redis://app:wrong-"+secret+"@"+s.Addr())
			goodURLs = append(goodURLs, "redis://app:"+secret+"@"+s.Addr())
		}
		_, err := addrClient(t, path, wrongURLs, redlock.WithLogger(logger)).TryAcquire(ctx0(t), "k")
		if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Fatalf("wrong password: %v", err)
		}
		check("the error", err.Error())
		check("the error (%#v)", fmt.Sprintf("%#v", err))
		check("the log", logs.String())
		// Bad URLs with a password.
		for _, u := range []string{"redis://app:" + secret + "@host:notaport", "redis://app:" + secret + "@[::1", "redis://app:" + secret + "@h:1/x"} {
			_, err := redigo.NewFromAddrs([]string{u})
			if err == nil {
				t.Fatalf("%s: no error", u)
			}
			check("a bad URL's error", err.Error())
		}
		// String() of a pool and of a client's errors with the right password.
		p, err := pool.NewFromURL(goodURLs[0])
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		check("String()", p.String()+fmt.Sprint(p)+fmt.Sprintf("%+v", p))
		servers[1].Kill()
		l, err := addrClient(t, path, goodURLs, redlock.WithLogger(logger)).TryAcquire(ctx0(t), "k")
		if err != nil {
			t.Fatal(err)
		}
		err = l.Release(ctx0(t))
		check("the log", logs.String())
		if err != nil {
			check("the release error", err.Error())
		}
	})
}

func ctx0(t *testing.T) context.Context { return ctxT(t) }

// A lock user the ACL refuses SUBSCRIBE (the rule set without +subscribe)
// still locks, and its waiters, whose subscriptions the masters refuse with
// NOPERM, poll and get the lock. The refusal is logged once per master —
// the subscriber is restarted every second while a waiter waits, and each
// restart is refused again — and the masters are never reported as failing:
// they serve every lock command. (Before, the refusal was not logged at all;
// recorded as the failure of a master, it would have turned the master
// failing and answering again once a second.)
func TestSecurity_subscribeRefusedByACLIsLoggedOnceAndWaitersPoll(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		t.Parallel() // its own masters, client and log; no duration bounded from above
		servers := redistest.Start(t, 3)
		urls := aclUser(t, servers, "nosub", strings.Replace(minimalACL, " +subscribe ", " ", 1))
		var logs syncBuffer
		c := addrClient(t, path, urls, redlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		ctx := ctxT(t)
		l, err := c.Acquire(ctx, "lock:nosub")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l2, err := c.Acquire(ctx, "lock:nosub", redlock.WithWait(10*time.Second))
			if err == nil {
				err = l2.Release(ctx)
			}
			got <- err
		}()
		// Long enough for the subscribers to be refused, restarted and
		// refused again.
		time.Sleep(2500 * time.Millisecond) // the subject: the lock's TTL passes
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("the waiter: %v", err)
		}
		out := logs.String()
		if n := strings.Count(out, "refuses release notices"); n != len(servers) {
			t.Errorf("the refusal was logged %d times, want once per master (%d):\n%s", n, len(servers), out)
		}
		if !strings.Contains(out, "NOPERM") || !strings.Contains(out, "subscribe") {
			t.Errorf("the log does not say that SUBSCRIBE was refused:\n%s", out)
		}
		if strings.Contains(out, "master failing") {
			t.Errorf("a master that serves locks was reported failing:\n%s", out)
		}
	})
}
