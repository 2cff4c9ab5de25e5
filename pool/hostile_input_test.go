package pool_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

// Hostile input to the guard and to the redaction of credentials.

// A password with '/', '?' or '#' not escaped ends the URL's authority
// early: the URL parser then takes part of the password for the port, and
// a '%' not followed by two hex digits makes it quote the escape. No part
// of the user information is ever quoted back.
func TestParseURL_neverQuotesPartOfTheUserInfo(t *testing.T) {
	for _, tc := range []struct{ url, secret string }{
		{"redis://app:Sec7et/tail@127.0.0.1:6379", "Sec7et"},
		{"redis://app:Sec7et#tail@127.0.0.1:6379", "Sec7et"},
		{"redis://app:Sec7et?tail@127.0.0.1:6379", "Sec7et"},
		{"redis://:Sec7et/x@127.0.0.1:6379", "Sec7et"},
		{"redis://app:65000/x@127.0.0.1:6379", "65000"},
		{"redis://app:Sec%zz7et@127.0.0.1:6379", "%zz"},
		{"redis://app:Sec7et%4@127.0.0.1:6379", "%4"},
		{"redis://Us%zzer:pw@127.0.0.1:6379", "%zz"},
		{"redis://Us%zzer@127.0.0.1:6379", "%zz"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, _, err := pool.ParseURL(tc.url)
			if !errors.Is(err, pool.ErrBadURL) {
				t.Fatalf("err = %v, want ErrBadURL", err)
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Errorf("the error quotes part of the user information (%q): %v", tc.secret, err)
			}
			_, err = pool.NewFromURL(tc.url)
			if err == nil || strings.Contains(err.Error(), tc.secret) {
				t.Errorf("NewFromURL: %v", err)
			}
		})
	}
	// Without user information the reason is still given.
	if _, _, err := pool.ParseURL("redis://h%zz:1"); err == nil || !strings.Contains(err.Error(), "escape") {
		t.Errorf("err = %v, want the parser's reason", err)
	}
}

// Passwords that are common words, digits, or regular-expression
// metacharacters: what a hostile master sends is redacted, the errors stay
// what they were for errors.As (a *ProtocolError, a timeout), and
// redacting twice changes nothing more.
func TestRedisPool_redactionKeepsErrorsUsable(t *testing.T) {
	huge := hostile.Start(t, hostile.Reply("$300000000000000\r\n"))
	silent := hostile.Silent(t)
	for _, pw := range []string{"1", "e", "o", "a", "OK", "ERR", "redis", "[redacted]", `.*+?(\`, "a]b"} {
		t.Run(pw, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			p, err := pool.New(huge, pool.WithAuth("", pw))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			_, err = p.GetContext(ctx)
			var pe *pool.ProtocolError
			if !errors.As(err, &pe) {
				t.Errorf("err = %v, want a *pool.ProtocolError", err)
			}
			if again := p.RedactError(err); again.Error() != err.Error() {
				t.Errorf("redacted twice:\n%s\n%s", err, again)
			}

			p2, err := pool.New(silent, pool.WithAuth("", pw), pool.WithReadTimeout(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer p2.Close()
			_, err = p2.GetContext(ctx)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Errorf("err = %v, want a net.Error that is a timeout", err)
			}
			if again := p2.RedactError(err); again.Error() != err.Error() {
				t.Errorf("redacted twice:\n%s\n%s", err, again)
			}

			// The master's own words, with the password in them.
			echo := redis.Error("ERR x" + pw + "y " + pw + " 'u' " + pw)
			got := p.RedactError(echo)
			if _, ok := got.(redis.Error); !ok || strings.Count(got.Error(), "[redacted]") < 3 {
				t.Errorf("RedactError(%q) = %#v", echo, got)
			}
			if p.RedactError(got).Error() != got.Error() {
				t.Errorf("redacted twice: %q -> %q", got, p.RedactError(got))
			}
			wrapped := fmt.Errorf("read: %w", &pool.ProtocolError{Problem: "a line longer than 1 bytes " + pw, Offset: 1})
			if r := p.RedactError(wrapped); !errors.As(r, &pe) || strings.Contains(strings.ReplaceAll(r.Error(), "[redacted]", ""), pw) && len(pw) > 3 {
				t.Errorf("RedactError(%v) = %v", wrapped, r)
			}
		})
	}
}

// parseAll parses replies from chunks with redigo, through a guard when
// l is not nil, until an error; it returns what it parsed and the error.
func parseAll(chunks [][]byte, l *pool.Limits) ([]any, error) {
	cp := make([][]byte, len(chunks))
	for i, c := range chunks {
		cp[i] = append([]byte(nil), c...)
	}
	var nc net.Conn = &chunkConn{chunks: cp}
	if l != nil {
		nc = pool.GuardConn(nc, *l)
	}
	c := redis.NewConn(nc, 0, 0)
	var out []any
	for {
		v, err := c.Receive()
		var re redis.Error
		if errors.As(err, &re) {
			out = append(out, err)
			continue
		}
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
}

// chunkings splits data in the ways a TCP stream can arrive: whole, byte by
// byte, in small pieces, cut just before and after every '\r' and '\n',
// and in pieces of pseudo-random sizes.
func chunkings(data []byte) map[string][][]byte {
	out := map[string][][]byte{"whole": {data}}
	for _, k := range []int{1, 2, 3, 7, 4095, 4096, 4097, 16383} {
		if k < 4095 && len(data) > 200_000 || k < 3 && len(data) > 50_000 {
			continue // (slow under -race; the framing is cut the same way in smaller streams)
		}
		var cs [][]byte
		for i := 0; i < len(data); i += k {
			cs = append(cs, data[i:min(i+k, len(data))])
		}
		out[fmt.Sprint("pieces of ", k)] = cs
	}
	for _, sep := range []byte{'\r', '\n'} {
		for _, after := range []int{0, 1} {
			var cs [][]byte
			last := 0
			for i, b := range data {
				if b == sep && i+after > last {
					cs = append(cs, data[last:i+after])
					last = i + after
				}
			}
			out[fmt.Sprintf("cut at %q+%d", sep, after)] = append(cs, data[last:])
		}
	}
	var cs [][]byte
	for i, k := 0, 1; i < len(data); k = k*31%977 + 1 {
		cs = append(cs, data[i:min(i+k, len(data))])
		i += k
	}
	out["random sizes"] = cs
	return out
}

// Valid replies pass the guard unchanged however the stream is cut: the
// framing split byte by byte, CR and LF in separate reads, values just
// above and below the size held back (16 KiB), many replies in one read
// (redigo reads past the reply it wants, so the guard sees the next ones
// early), and odd but valid forms (leading zeros, "-0", a status with a
// bare '\r' in it).
func TestGuardConn_anyCutOfValidRepliesPassesUnchanged(t *testing.T) {
	b := func(n int) string { return fmt.Sprintf("$%d\r\n%s\r\n", n, strings.Repeat("v", n)) }
	arr := func(n int, elem string) string { return fmt.Sprintf("*%d\r\n", n) + strings.Repeat(elem, n) }
	for name, stream := range map[string]string{
		"odd valid forms": "$003\r\nabc\r\n:-0\r\n:007\r\n+OK\rX\r\n+OK\r\r\n+\r\n-\r\n$0\r\n\r\n$-1\r\n*-1\r\n*0\r\n" +
			":-9223372036854775808\r\n:9223372036854775807\r\n$2\r\n\r\n\r\n",
		"bulk just below the hold":     b(16384) + ":1\r\n",
		"bulk just above the hold":     b(16385) + ":1\r\n",
		"bulk at the hold, and +1, -1": b(16383) + b(16384) + b(16385) + "+OK\r\n",
		"array at the hold and +1":     arr(1024, ":1\r\n") + arr(1025, ":2\r\n") + "+OK\r\n",
		"big values in small arrays":   "*3\r\n" + b(20000) + "*2\r\n" + b(30000) + b(5) + "$-1\r\n" + b(100000),
		"held value nested in held":    arr(2000, "*1\r\n"+b(10)) + "*2\r\n" + arr(1100, b(20)) + b(70000),
		"many replies in one read":     strings.Repeat("+OK\r\n:1\r\n$-1\r\n$3\r\nabc\r\n", 500) + b(50000) + strings.Repeat(":1\r\n", 1000),
		"max default bulk":             b(pool.DefaultMaxBulk) + "+OK\r\n",
		"pub/sub messages":             strings.Repeat("*3\r\n$7\r\nmessage\r\n$4\r\n\x00\xff\r\n\r\n"+b(17000), 3),
		"nested to the default depth":  strings.Repeat("*2\r\n", pool.DefaultMaxDepth) + ":1\r\n" + strings.Repeat(":2\r\n", pool.DefaultMaxDepth),
	} {
		t.Run(name, func(t *testing.T) {
			data := []byte(stream)
			want, werr := parseAll([][]byte{data}, nil)
			if !errors.Is(werr, io.EOF) {
				t.Fatalf("redigo alone: %v", werr)
			}
			for how, chunks := range chunkings(data) {
				got, err := parseAll(chunks, &pool.Limits{})
				if !errors.Is(err, io.EOF) {
					t.Fatalf("%s: through the guard: %v after %d replies", how, err, len(got))
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: %d replies through the guard, %d without; they differ", how, len(got), len(want))
				}
			}
		})
	}
}

// Framing no RESP2 master sends is refused, however it is cut. (The
// replies before it are passed on when they came in an earlier read; in
// the same read as the violation they are dropped with it.)
func TestGuardConn_rejectsOddFramingHoweverCut(t *testing.T) {
	var cases []string
	for _, c := range "%~_,#!=(>|\r\n \x00\xff" {
		cases = append(cases, string([]byte{byte(c)})+"1\r\nx\r\n")
	}
	cases = append(cases,
		"$+3\r\nabc\r\n", "$ 3\r\nabc\r\n", "$3 \r\nabc\r\n", "*-2\r\n", "$-0\r\n", "$-01\r\n", "*--1\r\n",
		":\r\n", ":-\r\n", ":+1\r\n", ":1-\r\n", "*1\r\n\r\n", "$3\r\nabc\n", "$3\r\nabc\r\r", ":1\rx",
		"+OK\n", "-ERR\n", "$3\r\nab\r\n\r\n", ":12345678901234567890\r\n", "*2\r\n$-1\r\n\n",
	)
	for _, bad := range cases {
		data := []byte("+OK\r\n" + bad)
		for how, chunks := range chunkings(data) {
			got, err := parseAll(chunks, &pool.Limits{})
			var pe *pool.ProtocolError
			if !errors.As(err, &pe) || len(got) > 1 || len(got) == 1 && got[0] != "OK" || how == "pieces of 1" && len(got) != 1 {
				t.Errorf("%q, %s: %v after %v, want +OK then a ProtocolError", bad, how, err, got)
			}
		}
	}
}

// Each limit, hit exactly, passes; one over, it breaks the connection.
func TestGuardConn_limitsExactlyAndOneOver(t *testing.T) {
	lim := pool.Limits{MaxBulk: 100, MaxArray: 10, MaxDepth: 3, MaxLine: 20, MaxReply: 1000}
	b := func(n int) string { return fmt.Sprintf("$%d\r\n%s\r\n", n, strings.Repeat("v", n)) }
	for _, tc := range []struct {
		name      string
		at, over  string
		overError string
	}{
		{"MaxBulk", b(100), b(101), "bulk string of more than 100"},
		{"MaxArray", "*10\r\n" + strings.Repeat(":1\r\n", 10), "*11\r\n" + strings.Repeat(":1\r\n", 11), "more than 10 elements"},
		{"MaxDepth", "*1\r\n*1\r\n*1\r\n:1\r\n", "*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "nested more than 3"},
		{"MaxLine", "+" + strings.Repeat("x", 20) + "\r\n", "+" + strings.Repeat("x", 21) + "\r\n", "longer than 20"},
		{"MaxLine of an error", "-" + strings.Repeat("x", 20) + "\r\n", "-" + strings.Repeat("x", 21) + "\r\n", "longer than 20"},
		// What Limits documents: a value costs 32, a bulk string its
		// bytes more, an array 16 per element more.
		{"MaxReply", "*2\r\n" + b(100) + b(100), "", fmt.Sprint(32 + 2*16 + 2*(32+100))},
		{"MaxReply of a bulk", b(968), "", fmt.Sprint(968 + 32)},
		{"MaxReply of lines", "*3\r\n+OK\r\n:12\r\n$-1\r\n", "", fmt.Sprint(32 + 3*16 + (32 + 2) + 32 + 32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lim
			if strings.HasPrefix(tc.name, "MaxReply") {
				l.MaxBulk = 2000
				// The reply's exact cost is the limit; one byte less is one over.
				cost := replyCost(t, tc.at)
				if fmt.Sprint(cost) != tc.overError {
					t.Errorf("the reply costs %d, want %s", cost, tc.overError)
				}
				l.MaxReply = cost
				if _, err := parseAll([][]byte{[]byte(tc.at)}, &l); !errors.Is(err, io.EOF) {
					t.Fatalf("at MaxReply %d: %v", cost, err)
				}
				l.MaxReply = cost - 1
				if _, err := parseAll([][]byte{[]byte(tc.at)}, &l); err == nil || !strings.Contains(err.Error(), "once parsed") {
					t.Fatalf("one over MaxReply: %v", err)
				}
				return
			}
			for how, chunks := range chunkings([]byte(tc.at)) {
				if got, err := parseAll(chunks, &l); !errors.Is(err, io.EOF) || len(got) != 1 {
					t.Fatalf("at the limit, %s: %v", how, err)
				}
			}
			for how, chunks := range chunkings([]byte(tc.over)) {
				_, err := parseAll(chunks, &l)
				var pe *pool.ProtocolError
				if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.overError) {
					t.Fatalf("one over, %s: %v", how, err)
				}
			}
		})
	}
}

// replyCost finds the smallest MaxReply that lets reply through.
func replyCost(t *testing.T, reply string) int {
	t.Helper()
	lo, hi := 1, 1<<20
	for lo < hi {
		mid := (lo + hi) / 2
		_, err := parseAll([][]byte{[]byte(reply)}, &pool.Limits{MaxBulk: 2000, MaxReply: mid})
		if errors.Is(err, io.EOF) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// FuzzGuardDifferential: bytes the guard lets through whole are bytes
// redigo parses, alone, without a panic or a protocol error; and through
// the guard, cut in any pieces, they give the same replies.
func FuzzGuardDifferential(f *testing.F) {
	for _, s := range []string{
		"+OK\r\n", "-ERR x\r\n", ":-12\r\n", "$3\r\nabc\r\n", "$-1\r\n", "*-1\r\n", "*0\r\n", "$003\r\nabc\r\n",
		"*2\r\n$1\r\na\r\n*1\r\n:1\r\n", "+OK\rX\r\n", ":-0\r\n", "$0\r\n\r\n", "*1\r\n*1\r\n*1\r\n:1\r\n",
		"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nid\r\n", "$2000\r\n" + strings.Repeat("x", 2000) + "\r\n",
		":9223372036854775807\r\n", ":9999999999999999999\r\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	lim := pool.Limits{MaxBulk: 4096, MaxArray: 64, MaxDepth: 4, MaxLine: 512, MaxReply: 32 << 10}
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		var out strings.Builder
		if _, err := io.Copy(&out, pool.GuardConn(&chunkConn{chunks: [][]byte{append([]byte(nil), data...)}}, lim)); err != nil || out.Len() != len(data) {
			return // refused, or held back: nothing for redigo to compare
		}
		var direct []any
		var derr error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("redigo panicked on bytes the guard passed: %v", p)
				}
			}()
			direct, derr = parseAll([][]byte{data}, nil)
		}()
		if !errors.Is(derr, io.EOF) && !errors.Is(derr, io.ErrUnexpectedEOF) {
			t.Fatalf("the guard passed %q, redigo alone fails: %v", data, derr)
		}
		var chunks [][]byte
		for rest, k := data, int(split)+1; len(rest) > 0; k = k*7%61 + 1 {
			n := min(k, len(rest))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		guarded, _ := parseAll(chunks, &lim)
		if fmt.Sprintf("%#v", guarded) != fmt.Sprintf("%#v", direct) {
			t.Fatalf("%q: through the guard %#v, alone %#v", data, guarded, direct)
		}
	})
}

// Many connections, each with a value announced and partly sent: the
// client pays about what arrived on each, not what was announced. The
// parser still sizes what the guard lets through from the header (values
// up to 16 KiB, arrays up to 1024 elements), so one connection costs at
// most the nesting depth times 16 KiB beyond what arrived.
func TestGuardConn_partialValuesCostAboutWhatArrived(t *testing.T) {
	const conns = 100
	for _, tc := range []struct {
		name    string
		sent    string
		perConn uint64 // bytes allocated at most, per connection
	}{
		{"announced 1 MB, 2000 bytes sent", "$1000000\r\n" + strings.Repeat("x", 2000), 24 << 10},
		{"announced 60000 elements, 500 sent", "*60000\r\n" + strings.Repeat(":1\r\n", 500), 24 << 10},
		{"announced 16385 bytes, 100 sent", "$16385\r\n" + strings.Repeat("x", 100), 24 << 10},
		{"announced 16384 bytes, 100 sent", "$16384\r\n" + strings.Repeat("x", 100), 24 << 10},
		{"arrays of 1024 nested 8 deep", strings.Repeat("*1024\r\n", 8), 24 << 10},
		{"arrays of 1000 nested 8 deep", strings.Repeat("*1000\r\n", 8), 40 << 10},
		{"arrays of 500 nested, in a bulk's wake", "*2\r\n$16000\r\n" + strings.Repeat("x", 16000) + "\r\n" + strings.Repeat("*500\r\n", 7), 24<<10 + 2*16000},
		{"arrays of 1025 nested 8 deep", strings.Repeat("*1025\r\n", 8), 24 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := totalAlloc()
			for i := 0; i < conns; i++ {
				c := redis.NewConn(pool.GuardConn(&chunkConn{chunks: [][]byte{[]byte(tc.sent)}}, pool.Limits{}), 0, 0)
				if _, err := c.Receive(); err == nil {
					t.Fatal("a reply from an incomplete value")
				}
			}
			per := (totalAlloc() - before) / conns
			t.Logf("%d bytes sent, %d bytes allocated per connection", len(tc.sent), per)
			if per > tc.perConn {
				t.Errorf("%d bytes allocated per connection, want at most %d", per, tc.perConn)
			}
		})
	}
}

// A master behind TLS is guarded the same: hostile framing inside the TLS
// stream is a *ProtocolError, never a panic; and a TLS failure (a
// certificate from the wrong CA) with credentials in the URL names
// neither the username nor the password, in any format.
func TestTLS_guardedInsideAndCredentialsNeverShow(t *testing.T) {
	certs := redistest.NewCerts(t)
	cert, err := tls.LoadX509KeyPair(certs.CertFile, certs.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns sync.WaitGroup
	defer func() { ln.Close(); <-done; conns.Wait() }()
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					if _, err := io.WriteString(c, "*1\r\n$300000000000000\r\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	const user, secret = "tlsuser", "TlsSecret-77"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	good := tlsFiles(t, certs.CAFile, "", "", "")
	p, err := pool.NewFromURL("rediss://"+user+":"+secret+"@"+ln.Addr().String(), pool.WithTLS(good))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.GetContext(ctx) // AUTH gets the hostile reply
	var pe *pool.ProtocolError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a *pool.ProtocolError", err)
	}

	wrong := tlsFiles(t, certs.OtherCAFile, "", "", "")
	p2, err := pool.NewFromURL("rediss://"+user+":"+secret+"@"+ln.Addr().String(), pool.WithTLS(wrong))
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	_, err = p2.GetContext(ctx)
	var de *pool.DialError
	if !errors.As(err, &de) {
		t.Fatalf("err = %v, want a *pool.DialError", err)
	}
	for _, s := range []string{fmt.Sprintf("%v", err), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err), fmt.Sprintf("%#v", de.Err), p2.String()} {
		if strings.Contains(s, secret) || strings.Contains(s, user) {
			t.Errorf("shows the credentials: %s", s)
		}
	}
}
