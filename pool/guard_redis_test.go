package pool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

// chunkConn is a net.Conn that reads from a list of chunks, one per Read,
// and counts how many it has handed out.
type chunkConn struct {
	net.Conn // nil: only Read and the deadlines are used
	chunks   [][]byte
	served   int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	for c.served < len(c.chunks) && len(c.chunks[c.served]) == 0 {
		c.served++
	}
	if c.served == len(c.chunks) {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[c.served])
	c.chunks[c.served] = c.chunks[c.served][n:]
	return n, nil
}
func (c *chunkConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *chunkConn) Close() error                     { return nil }
func (c *chunkConn) SetDeadline(time.Time) error      { return nil }
func (c *chunkConn) SetReadDeadline(time.Time) error  { return nil }
func (c *chunkConn) SetWriteDeadline(time.Time) error { return nil }

// receiveAll parses replies from data through a guard until an error.
func receiveAll(data []byte, l pool.Limits) ([]any, error) {
	c := redis.NewConn(pool.GuardConn(&chunkConn{chunks: [][]byte{data}}, l), 0, 0)
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

func TestGuardConn_rejectsHostileFraming(t *testing.T) {
	small := pool.Limits{MaxBulk: 1000, MaxArray: 100, MaxDepth: 3, MaxLine: 50, MaxReply: 10_000}
	for _, tc := range []struct {
		name, data, says string
	}{
		{"huge bulk", "$300000000000000\r\n", "bulk string of more than 1000 bytes"},
		{"huge array", "*300000000000000\r\n", "array of more than 100 elements"},
		{"bulk past int64", "$99999999999999999999\r\n", "bulk string of more than"},
		{"integer past int64", ":99999999999999999999\r\n", "more than 19 digits"},
		{"deep nesting", strings.Repeat("*1\r\n", 4) + ":1\r\n", "nested more than 3 deep"},
		{"long line", "+" + strings.Repeat("x", 60) + "\r\n", "line longer than 50 bytes"},
		{"endless line", "-" + strings.Repeat("x", 1000), "line longer than 50 bytes"},
		{"bare newline", "+OK\n", "bare newline"},
		{"not a type", "!3\r\nabc\r\n", "not one of"},
		{"RESP3 map", "%1\r\n+a\r\n+b\r\n", "not one of"},
		{"bulk longer than its header", "$3\r\nabcd\r\n", "longer than its header"},
		{"bulk without CRLF", "$3\r\nabc\rx", "does not end"},
		{"negative length", "$-2\r\n", "negative length"},
		{"no digits", "$\r\n", "in a number"},
		{"letters in a length", "*1x\r\n", "in a number"},
		{"header without LF", "$3\rabc", "not followed"},
		{"reply too costly", "*20\r\n" + strings.Repeat("$900\r\n"+strings.Repeat("x", 900)+"\r\n", 20), "more than 10000 bytes once parsed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := receiveAll([]byte(tc.data), small)
			var pe *pool.ProtocolError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want a ProtocolError saying %q", err, tc.says)
			}
			// The violation sticks.
			g := pool.GuardConn(&chunkConn{chunks: [][]byte{[]byte(tc.data), []byte("+OK\r\n")}}, small)
			var gerr error
			for i := 0; i < 10 && gerr == nil; i++ {
				_, gerr = g.Read(make([]byte, 4096))
			}
			if _, err2 := g.Read(make([]byte, 10)); !errors.As(err2, &pe) {
				t.Errorf("a read after the violation: %v", err2)
			}
		})
	}
}

// A value that would cost the parser more than a few KB is passed on only
// once it has arrived: a master that announces a big value and trickles it
// makes the parser allocate nothing.
func TestGuardConn_holdsBackBigValuesUntilComplete(t *testing.T) {
	payload := strings.Repeat("x", 100_000)
	src := &chunkConn{chunks: [][]byte{[]byte("+OK\r\n$100000\r"), []byte("\n")}}
	for i := 0; i < len(payload); i += 30_000 {
		src.chunks = append(src.chunks, []byte(payload[i:min(i+30_000, len(payload))]))
	}
	src.chunks = append(src.chunks, []byte("\r\n:7\r\n"))
	total := len(src.chunks)
	g := pool.GuardConn(src, pool.Limits{})
	buf := make([]byte, 4096)
	n, err := g.Read(buf)
	if err != nil || string(buf[:n]) != "+OK\r\n$100000\r" {
		t.Fatalf("first read = %q, %v", buf[:n], err)
	}
	n, err = g.Read(buf)
	if err != nil || buf[0] != '\n' {
		t.Fatalf("second read = %q, %v", buf[:min(n, 10)], err)
	}
	if src.served < total-1 {
		t.Fatalf("the header's end was passed on after %d of %d chunks, before the value arrived", src.served, total)
	}
	// The rest passes through unchanged.
	rest, _ := io.ReadAll(g)
	if got := string(buf[:n]) + string(rest); got != "\n"+payload+"\r\n:7\r\n" {
		t.Fatalf("the stream changed: %d bytes", len(got))
	}
}

// Every reply shape a real redis-server gives what the library sends —
// the scripts, pub/sub, and what redlock status and doctor read — passes
// the guard with the default limits, unchanged.
func TestGuardConn_acceptsWhatRealRedisSends(t *testing.T) {
	srv := redistest.StartOne(t)
	// Replies of a mebibyte and more, read under -race on a busy host:
	// the default 1 s read timeout is not this test's subject.
	p := srv.Pool(pool.WithReadTimeout(15*time.Second), pool.WithWriteTimeout(15*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := p.GetContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := strings.Repeat("v", pool.DefaultMaxBulk)
	fields := []any{"HSET", "rw"}
	for i := 0; i < 5000; i++ {
		fields = append(fields, fmt.Sprintf("r:token-%d", i), i)
	}
	for _, setup := range [][]any{
		{"SET", "big", big},
		fields,
		{"ZADD", "z", 1, "a", 2, "b"},
		{"SET", strings.Repeat("k", 100_000), "long key"},
	} {
		if _, err := srv.Do(setup[0].(string), setup[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range [][]any{
		{"PING"}, {"SET", "k", "tok", "NX", "PX", 10000}, {"SET", "k", "tok", "NX", "PX", 10000}, {"GET", "k"},
		{"GET", "missing"}, {"PTTL", "k"}, {"TYPE", "k"}, {"DEL", "k"}, {"EXISTS", "k"},
		{"GET", "big"}, {"HGETALL", "rw"}, {"HGETALL", "missing"}, {"ZRANGE", "z", 0, -1, "WITHSCORES"},
		{"INFO", "server"}, {"INFO", "replication"}, {"CONFIG", "GET", "*"}, {"TIME"},
		{"SCRIPT", "LOAD", "return 1"}, {"EVAL", "return {1, {2, {3, {'x', false}}}, 'ok'}", 0},
		{"EVAL", "return redis.error_reply('ERR from a script')", 0}, {"NOSUCHCOMMAND"},
		{"GET", strings.Repeat("k", 100_000)}, {"PUBLISH", "ch", "msg"},
	} {
		name := fmt.Sprint(cmd[0], " ", cmd[1:])
		got, err := redis.DoContext(c, ctx, cmd[0].(string), cmd[1:]...)
		var re redis.Error
		if err != nil && !errors.As(err, &re) {
			t.Fatalf("%.60s: %v", name, err)
		}
		switch cmd[0] {
		case "TIME", "INFO", "SET", "DEL", "PTTL":
			continue // they change, or change the data, from call to call
		}
		want, wantErr := srv.Do(cmd[0].(string), cmd[1:]...)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("%.60s: err = %v, want %v", name, err, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%.60s: through the guard %.100v, directly %.100v", name, got, want)
		}
	}
	// Pub/sub with a channel named after a 100 KB key.
	sub, err := p.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ch := "quorumlock:released:" + strings.Repeat("k", 100_000)
	psc := redis.PubSubConn{Conn: sub}
	if err := psc.Subscribe(ch); err != nil {
		t.Fatal(err)
	}
	if v, ok := psc.ReceiveWithTimeout(5 * time.Second).(redis.Subscription); !ok || v.Channel != ch {
		t.Fatalf("subscribe: %v", v)
	}
	if _, err := srv.Do("PUBLISH", ch, "id"); err != nil {
		t.Fatal(err)
	}
	if m, ok := psc.ReceiveWithTimeout(5 * time.Second).(redis.Message); !ok || m.Channel != ch || string(m.Data) != "id" {
		t.Fatalf("message: %v", m)
	}
}

// FuzzGuard: any bytes from a master, read through a guard by redigo's
// parser, never panic and never make one reply cost more than the limits
// allow; the guard passes on a prefix of what it read, unchanged; and
// valid framing within the limits passes whole.
func FuzzGuard(f *testing.F) {
	for _, s := range []string{
		"+OK\r\n", "-ERR x\r\n", ":-12\r\n", "$3\r\nabc\r\n", "$-1\r\n", "*-1\r\n", "*0\r\n",
		"*2\r\n$1\r\na\r\n*1\r\n:1\r\n", "$300000000000000\r\n", "*300000000000000\r\n",
		"$99999999999999999999\r\n", strings.Repeat("*1\r\n", 50), "$5000\r\nxx", "+no end",
		"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nid\r\n",
	} {
		f.Add([]byte(s), uint8(7))
	}
	lim := pool.Limits{MaxBulk: 4096, MaxArray: 64, MaxDepth: 4, MaxLine: 512, MaxReply: 32 << 10}
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		// Arbitrary bytes: read in pieces of varying size.
		var chunks [][]byte
		for rest, k := data, int(split)+1; len(rest) > 0; k = k*7%61 + 1 {
			n := min(k, len(rest))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		var out bytes.Buffer
		g := pool.GuardConn(&chunkConn{chunks: chunks}, lim)
		if _, err := io.Copy(&out, g); err != nil {
			var pe *pool.ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a ProtocolError", err)
			}
		}
		if !bytes.HasPrefix(data, out.Bytes()) {
			t.Fatalf("the guard changed the stream: %q from %q", out.Bytes(), data)
		}
		// Through redigo's parser, reply by reply, within the cost limit.
		c := redis.NewConn(pool.GuardConn(&chunkConn{chunks: [][]byte{data}}, lim), 0, 0)
		for i := 0; i < 1000; i++ {
			before := totalAlloc()
			_, err := c.Receive()
			if grew := totalAlloc() - before; grew > 2*uint64(lim.MaxReply)+64<<10 {
				t.Fatalf("one reply allocated %d bytes", grew)
			}
			var re redis.Error
			if err != nil && !errors.As(err, &re) {
				break
			}
		}
		// Valid framing made from the same bytes passes whole.
		valid := encode(data[:min(len(data), 16<<10)], 0)
		got, err := receiveAll(valid, lim)
		if !errors.Is(err, io.EOF) || len(got) != 1 {
			t.Fatalf("valid reply %q: %d replies, %v", valid, len(got), err)
		}
	})
}

// encode makes one valid reply, within FuzzGuard's limits, out of data.
func encode(data []byte, depth int) []byte {
	if len(data) == 0 {
		return []byte(":0\r\n")
	}
	k, rest := data[0], data[1:]
	switch k % 6 {
	case 0:
		return []byte(fmt.Sprintf("+%x\r\n", rest[:min(len(rest), 8)]))
	case 1:
		return []byte(fmt.Sprintf("-ERR %x\r\n", rest[:min(len(rest), 8)]))
	case 2:
		return []byte(fmt.Sprintf(":%d\r\n", -int(k)))
	case 3:
		rest = rest[:min(len(rest), 4000)]
		return []byte(fmt.Sprintf("$%d\r\n%s\r\n", len(rest), rest))
	case 4:
		return []byte("$-1\r\n")
	}
	if depth >= 3 {
		return []byte("*-1\r\n")
	}
	n := int(k/6) % 5
	b := []byte(fmt.Sprintf("*%d\r\n", n))
	for i := 0; i < n; i++ {
		part := rest[len(rest)*i/n : len(rest)*(i+1)/n]
		b = append(b, encode(part, depth+1)...)
	}
	return b
}

func totalAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}
