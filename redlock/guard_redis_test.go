package redlock_test

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// A hostile master beside two real ones: bytes that would crash redigo's
// parser, or make it allocate what the master merely announces, cost one
// failed master and nothing else — on both connection paths, for the
// lock commands and for the pub/sub connection of a waiter.

// hostileReplies are answers that crash or exhaust an unguarded parser.
var hostileReplies = []struct {
	name   string
	answer hostile.Answer
	// recoverable: a plain *redis.Pool survives it by the backstop
	// (a stack overflow is beyond any recover).
	recoverable bool
}{
	{"huge bulk header", hostile.Reply("$300000000000000\r\n"), true},
	{"huge array header", hostile.Reply("*300000000000000\r\n"), true},
	{"bulk header past int64", hostile.Reply("$99999999999999999999\r\n"), true},
	{"arrays nested without end", hostile.Stream("", "*1\r\n"), false},
}

func TestHostileMaster_framingCostsOneMaster(t *testing.T) {
	real := redistest.Start(t, 2)
	for _, tc := range hostileReplies {
		t.Run(tc.name, func(t *testing.T) {
			bad := hostile.Start(t, tc.answer)
			forEachPath(t, func(t *testing.T, path connPath) {
				var logs syncBuffer
				c := addrClient(t, path, []string{real[0].Addr(), bad, real[1].Addr()},
					redlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
				lockAndWake(t, c, "k")
				if !strings.Contains(logs.String(), "protocol violation") {
					t.Errorf("the log does not name the protocol violation:\n%s", logs.String())
				}
				// Without a quorum of real masters the error names the
				// violation, as a *pool.ProtocolError of that master.
				_, err := addrClient(t, path, []string{real[0].Addr(), bad}).TryAcquire(ctxT(t), "k2")
				var pe *pool.ProtocolError
				var ne *redlock.NodeError
				if !errors.As(err, &pe) || !errors.As(err, &ne) || ne.Addr != bad {
					t.Fatalf("err = %v, want a *pool.ProtocolError in the NodeError of %s", err, bad)
				}
			})
		})
	}
}

// lockAndWake acquires and releases key a few times, then has a waiter
// (which subscribes on every master) woken by a release.
func lockAndWake(t *testing.T, c *redlock.Client, key string) {
	t.Helper()
	ctx := ctxT(t)
	for i := 0; i < 5; i++ {
		l, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatalf("acquisition %d on the healthy quorum: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	l, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l2, err := c.Acquire(ctx, key, redlock.WithWait(10*time.Second))
		if err == nil {
			err = l2.Release(ctx)
		}
		got <- err
	}()
	// Its first attempt refused, the waiter registers, which subscribes
	// it on every master (or it has returned: its error is read below).
	waitUntil(t, "the waiter registered", func() bool {
		_, waited, _ := c.Sizes()
		return waited == 1 || len(got) > 0
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

// A pool the client does not own (a plain *redis.Pool) is not guarded;
// the backstop turns the parser's panic into a failed master, on both
// paths: the pipelined one (such a pool pipelines through its
// DialContext), where the dial's SCRIPT LOAD or the mux reader meets the
// hostile reply, and the pooled one.
func TestHostileMaster_plainPoolBackstop(t *testing.T) {
	real := redistest.Start(t, 2)
	plain := func(addr string) *redis.Pool {
		p := &redis.Pool{MaxIdle: 4, DialContext: func(ctx context.Context) (redis.Conn, error) {
			return redis.DialContext(ctx, "tcp", addr, redis.DialReadTimeout(time.Second))
		}}
		t.Cleanup(func() { p.Close() })
		return p
	}
	for _, tc := range hostileReplies {
		if !tc.recoverable {
			continue // a stack overflow kills the process: only the guard helps
		}
		for _, when := range []string{"to every command", "once the scripts are loaded"} {
			t.Run(tc.name+"/"+when, func(t *testing.T) {
				answer := tc.answer
				if when != "to every command" {
					answer = afterScriptLoad(tc.answer)
				}
				bad := hostile.Start(t, answer)
				forEachPath(t, func(t *testing.T, path connPath) {
					c, err := redigo.New([]pool.Pool{plain(real[0].Addr()), plain(bad), plain(real[1].Addr())}, path.Option(), redlock.WithTimeout(realTimeout))
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					lockAndWake(t, c, "k")
					c2, err := redigo.New([]pool.Pool{plain(real[0].Addr()), plain(bad)}, path.Option(), redlock.WithTimeout(realTimeout))
					if err != nil {
						t.Fatal(err)
					}
					defer c2.Close()
					if _, err := c2.TryAcquire(ctxT(t), "k2"); !errors.Is(err, redlock.ErrParserPanic) {
						t.Fatalf("err = %v, want ErrPanic", err)
					}
				})
			})
		}
	}
}

// afterScriptLoad answers SCRIPT LOAD as Redis does (the script's SHA1),
// and every other command with answer.
func afterScriptLoad(answer hostile.Answer) hostile.Answer {
	return func(w io.Writer, cmd []string, quit <-chan struct{}) error {
		if len(cmd) == 3 && strings.EqualFold(cmd[0], "SCRIPT") && strings.EqualFold(cmd[1], "LOAD") {
			sum := sha1.Sum([]byte(cmd[2]))
			_, err := fmt.Fprintf(w, "$40\r\n%x\r\n", sum)
			return err
		}
		return answer(w, cmd, quit)
	}
}

// A master that announces a huge bulk string and then sends a byte every
// 50ms costs the client no memory, and acquisitions on the healthy quorum
// all succeed; so does one that announces a bulk string under the limit
// (held back until it arrives, which it never does).
func TestHostileMaster_trickledBulkCostsNoMemory(t *testing.T) {
	real := redistest.Start(t, 2)
	for _, head := range []string{"$999999999\r\n", "$1000000\r\n", "*60000\r\n"} {
		t.Run(strings.TrimSpace(head), func(t *testing.T) {
			bad := hostile.Start(t, hostile.Trickle(head, 50*time.Millisecond))
			forEachPath(t, func(t *testing.T, path connPath) {
				c := addrClient(t, path, []string{real[0].Addr(), bad, real[1].Addr()})
				ctx := ctxT(t)
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				n := 0
				for start := time.Now(); time.Since(start) < 1500*time.Millisecond; n++ {
					l, err := c.Acquire(ctx, "k")
					if err != nil {
						t.Fatalf("acquisition %d on the healthy quorum: %v", n, err)
					}
					if err := l.Release(ctx); err != nil {
						t.Fatalf("release %d: %v", n, err)
					}
				}
				runtime.ReadMemStats(&after)
				grew := after.TotalAlloc - before.TotalAlloc
				t.Logf("%d acquisitions; %.1f MB allocated in all (%.1f KB each), heap %.1f MB -> %.1f MB",
					n, float64(grew)/1e6, float64(grew)/float64(n)/1e3, float64(before.HeapAlloc)/1e6, float64(after.HeapAlloc)/1e6)
				// Each announcement is 1 MB or more: an unguarded client
				// allocates it on every connection to the hostile master.
				if per := grew / uint64(n); per > 200<<10 {
					t.Errorf("%d bytes allocated per acquisition", per)
				}
			})
		})
	}
}

// Credentials never show, whatever a master echoes: a master whose AUTH was
// renamed away quotes the AUTH arguments in its error.
func TestHostileMaster_echoedCredentialsAreRedacted(t *testing.T) {
	const user, secret = "locker", "RealPw99"
	real := redistest.Start(t, 2)
	renamed := redistest.StartOne(t, redistest.WithArgs("--rename-command", "AUTH", ""))
	for _, s := range real {
		if _, err := s.Do("ACL", "SETUSER", user, "on", ">"+secret, "~*", "&*", "+@all"); err != nil {
			t.Fatal(err)
		}
	}
	// A hostile master that echoes the password in a reply to every command.
	echo := hostile.Start(t, func(w io.Writer, cmd []string, _ <-chan struct{}) error {
		_, err := w.Write([]byte("-ERR you said " + strings.Join(cmd, " ") + " and " + secret + "\r\n"))
		return err
	})
	url := func(addr string) string { return "redis://" + user + ":" + secret + "@" + addr }
	forEachPath(t, func(t *testing.T, path connPath) {
		var logs syncBuffer
		logger := redlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))
		check := func(what, s string) {
			t.Helper()
			if strings.Contains(s, secret) || strings.Contains(s, "'"+user+"'") {
				t.Errorf("%s shows the credentials: %s", what, s)
			}
		}
		for _, bad := range []string{renamed.Addr(), echo} {
			c := addrClient(t, path, []string{url(real[0].Addr()), url(bad), url(real[1].Addr())}, logger)
			lockAndWake(t, c, "k")
			_, err := addrClient(t, path, []string{url(real[0].Addr()), url(bad)}, logger).TryAcquire(ctxT(t), "k")
			if err == nil {
				t.Fatal("acquired with one of two masters failing")
			}
			check("the error", err.Error())
			if bad == renamed.Addr() && !strings.Contains(err.Error(), "unknown command") {
				t.Errorf("the error does not say why: %v", err)
			}
		}
		check("the log", logs.String())
		if !strings.Contains(logs.String(), "[redacted]") {
			t.Errorf("nothing was redacted in the log:\n%s", logs.String())
		}
	})
}
