package redlock_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// Attacks on the guard, the backstops and the redaction of credentials
// that the first tests did not try.

// leaks reports how text shows pw: as it is, as a Go-quoted string would
// show it, as the decimal bytes fmt prints for a []byte, or a prefix of
// 12 bytes or more (a reply cut short).
func leaks(text, pw string) string {
	q := strconv.Quote(pw)
	for _, form := range []struct{ name, s string }{
		{"as it is", pw},
		{"quoted", q[1 : len(q)-1]},
		{"as decimal bytes", strings.Trim(fmt.Sprint([]byte(pw)), "[]")},
		{"cut short", pw[:min(len(pw), 12)]},
	} {
		if strings.Contains(text, form.s) {
			return form.name
		}
	}
	return ""
}

// A hostile master that answers every command, AUTH included, with a reply
// that carries the password: a long bulk string (which an error message
// cuts short), a password a quoting function escapes, an array of it. The
// password never shows, in any form, in the error (%v, %+v, %#v of it and
// of each NodeError) or in the log (text and JSON).
func TestRedaction_passwordInRepliesNeverShows(t *testing.T) {
	real := redistest.Start(t, 2)
	const user = "locker"
	for _, tc := range []struct {
		name, pw string
		reply    func(pw string) string
	}{
		{"long bulk", "Lq7-" + strings.Repeat("Zx9", 14), func(pw string) string { return hostile.Bulk(pw) }},
		{"bulk that quoting escapes", `Pw"9\9` + "\x01Secret-Tail", func(pw string) string { return hostile.Bulk(pw) }},
		{"array of it", "ArrPw-77-AbcdefGh", func(pw string) string { return "*2\r\n" + hostile.Bulk(pw) + hostile.Bulk(pw) }},
		{"status line", "StatPw-77-AbcdefGh", func(pw string) string { return "+" + pw + "\r\n" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range real {
				if _, err := s.Do("ACL", "SETUSER", user, "reset", "on", ">"+tc.pw, "~*", "&*", "+@all"); err != nil {
					t.Fatal(err)
				}
			}
			bad := hostile.Reply(tc.reply(tc.pw))
			echo := hostile.Start(t, bad)
			url := func(addr string) string {
				return "redis://" + user + ":" + urlEscape(tc.pw) + "@" + addr
			}
			forEachPath(t, func(t *testing.T, path connPath) {
				var text, js syncBuffer
				logger := slog.New(slog.NewTextHandler(&text, nil))
				jsLogger := slog.New(slog.NewJSONHandler(&js, nil))
				c := addrClient(t, path, []string{url(real[0].Addr()), url(echo), url(real[1].Addr())}, redlock.WithLogger(logger))
				lockAndWake(t, c, "k")
				_, err := addrClient(t, path, []string{url(real[0].Addr()), url(echo)}, redlock.WithLogger(jsLogger)).TryAcquire(ctxT(t), "k")
				if err == nil {
					t.Fatal("acquired with one of two masters failing")
				}
				shown := []string{fmt.Sprintf("%v", err), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err), text.String()}
				var qe *redlock.QuorumError
				if errors.As(err, &qe) && qe.Failed != nil {
					for _, ne := range qe.Failed.Errors {
						shown = append(shown, fmt.Sprintf("%v", ne), fmt.Sprintf("%+v", ne), fmt.Sprintf("%#v", ne))
						var n *redlock.NodeError
						if errors.As(ne, &n) {
							shown = append(shown, fmt.Sprintf("%#v", n.Err), fmt.Sprintf("%+v", n.Err))
						}
					}
				}
				// The JSON log, decoded: each record's error as a string.
				for _, line := range strings.Split(strings.TrimSpace(js.String()), "\n") {
					var rec map[string]any
					if err := json.Unmarshal([]byte(line), &rec); err != nil {
						t.Fatalf("JSON log line %q: %v", line, err)
					}
					shown = append(shown, fmt.Sprint(rec))
				}
				if !strings.Contains(js.String(), echo) {
					t.Errorf("the JSON log does not name the hostile master:\n%s", js.String())
				}
				for i, s := range shown {
					if how := leaks(s, tc.pw); how != "" {
						t.Errorf("text %d shows the password %s:\n%s", i, how, s)
					}
				}
			})
		})
	}
}

// urlEscape escapes a password for the user information of a URL.
func urlEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// A password that is a letter or a digit shows up, redacted, all over the
// error text; the NodeError is still what it was: a silent master's is
// ErrMasterTimeout, a hostile one's holds the *pool.ProtocolError (the
// redaction used to hide both, on the pooled path the timeout too).
func TestRedaction_shortPasswordKeepsNodeErrorsUsable(t *testing.T) {
	silent := hostile.Silent(t)
	huge := hostile.Start(t, hostile.Reply("$300000000000000\r\n"))
	for _, pw := range []string{"e", "o", "1", "t"} {
		t.Run(pw, func(t *testing.T) {
			t.Parallel() // its own clients of the two fake masters; checks errors, not durations
			forEachPath(t, func(t *testing.T, path connPath) {
				for _, bad := range []string{silent, huge} {
					_, err := addrClient(t, path, []string{"redis://:" + pw + "@" + bad}).TryAcquire(ctxT(t), "k")
					var ne *redlock.NodeError
					var pe *pool.ProtocolError
					switch {
					case !errors.As(err, &ne):
						t.Errorf("%v: no NodeError", err)
					case bad == silent && !errors.Is(err, redlock.ErrMasterTimeout):
						t.Errorf("silent master: %v, want ErrMasterTimeout", err)
					case bad == huge && !errors.As(err, &pe):
						t.Errorf("hostile master: %v, want a *pool.ProtocolError", err)
					}
					if strings.Contains(err.Error(), "[r[") || strings.Contains(err.Error(), "[red[") {
						t.Errorf("redacted twice: %v", err)
					}
				}
			})
		})
	}
}

// A hostile master beside two real ones pushes, on the pub/sub connection
// of a waiter, what no master sends: messages of 1 MiB on a binary
// channel, one over the limit, messages of the wrong shape, RESP3 pushes,
// arrays nested without end, a flood of forged release notices. No crash,
// the heap stays within a few MB, every acquisition on the healthy quorum
// succeeds and the waiter is woken.
func TestSubscribe_hostilePubSubPushes(t *testing.T) {
	real := redistest.Start(t, 2)
	msg := func(ch, data string) string { return "*3\r\n$7\r\nmessage\r\n" + hostile.Bulk(ch) + hostile.Bulk(data) }
	big := strings.Repeat("d", pool.DefaultMaxBulk-64)
	for _, tc := range []struct {
		name string
		push func(i int, ch string) string
	}{
		{"1 MiB messages on a binary channel", func(i int, ch string) string {
			if i >= 4 { // (20 MiB at a time starved a loaded 2-core machine past the 500 ms timeout)
				return ""
			}
			return msg("\x00\xff"+ch+"\r\n", big)
		}},
		{"a message over MaxBulk", func(i int, ch string) string {
			if i > 0 {
				return ""
			}
			return msg(ch, big+strings.Repeat("x", 100))
		}},
		{"messages of the wrong shape", func(i int, ch string) string {
			return []string{
				"*3\r\n$7\r\nmessage\r\n:1\r\n:2\r\n", "*1\r\n$7\r\nmessage\r\n",
				"*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n" + hostile.Bulk(ch) + "*1\r\n:1\r\n", "*3\r\n$4\r\nnope\r\n$1\r\na\r\n$1\r\nb\r\n",
				"*3\r\n$7\r\nmessage\r\n$-1\r\n$-1\r\n", "*0\r\n", ":1\r\n", "",
			}[min(i, 7)]
		}},
		{"a RESP3 push", func(i int, ch string) string {
			if i > 0 {
				return ""
			}
			return ">3\r\n$7\r\nmessage\r\n" + hostile.Bulk(ch) + "$1\r\nx\r\n"
		}},
		{"arrays nested without end", func(i int, ch string) string {
			if i >= 1000 {
				return ""
			}
			return strings.Repeat("*1\r\n", 1000)
		}},
		{"a flood of forged release notices", func(i int, ch string) string {
			if i >= 5000 {
				return ""
			}
			return msg(ch, "forged-"+strconv.Itoa(i))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := hostile.Start(t, hostile.Subscriber(tc.push))
			forEachPath(t, func(t *testing.T, path connPath) {
				c := addrClient(t, path, []string{real[0].Addr(), bad, real[1].Addr()})
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for i := 0; i < 3; i++ {
					lockAndWake(t, c, "k")
				}
				// A 1 MiB message may still be on its way (allowed: it is
				// within MaxBulk); what stays must be within a few MB.
				var grew int64
				redistest.Within(3*time.Second, func() bool {
					runtime.GC()
					runtime.ReadMemStats(&after)
					grew = int64(after.HeapAlloc) - int64(before.HeapAlloc)
					return grew <= 8<<20
				})
				t.Logf("heap %.1f MB -> %.1f MB", float64(before.HeapAlloc)/1e6, float64(after.HeapAlloc)/1e6)
				if grew > 8<<20 {
					t.Errorf("the heap grew by %d bytes", grew)
				}
			})
		})
	}
}
