package redlock_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gomodule/redigo/redis"
)

// fakeMaster is a master on 127.0.0.1 that a test makes misbehave: it
// reads each command a client sends, lets the test's hook act on it, and
// unless told otherwise forwards it to a real redis-server and relays the
// reply. Commands of one connection are handled one at a time, in order,
// as Redis does.
type fakeMaster struct {
	t        *testing.T
	ln       net.Listener
	upstream string // the real master
	hook     func(fc *fakeConn, cmd []string) verdict
	done     chan struct{} // closed at cleanup: hooks stop waiting

	mu    sync.Mutex
	conns []*fakeConn
	wg    sync.WaitGroup
}

// verdict is what the fake master does with one command.
type verdict uint8

const (
	forward verdict = iota // run it on the real master and relay the reply
	swallow                // run it, send no reply
	hangUp                 // close the connection without running it
)

// fakeConn is one client connection of a fakeMaster.
type fakeConn struct {
	fm    *fakeMaster
	index int // 0 for the first connection the master accepted
	nc    net.Conn
	wmu   sync.Mutex    // serialises writes to the client
	gone  chan struct{} // closed when the connection has ended

	mu   sync.Mutex
	seen []string // the commands read, as "NAME arg1"
}

func newFakeMaster(t *testing.T, upstream string, hook func(fc *fakeConn, cmd []string) verdict) *fakeMaster {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fm := &fakeMaster{t: t, ln: ln, upstream: upstream, hook: hook, done: make(chan struct{})}
	t.Cleanup(func() {
		close(fm.done)
		ln.Close()
		fm.mu.Lock()
		for _, fc := range fm.conns {
			fc.nc.Close()
		}
		fm.mu.Unlock()
		fm.wg.Wait()
	})
	fm.wg.Add(1)
	go fm.accept()
	return fm
}

func (fm *fakeMaster) addr() string { return fm.ln.Addr().String() }

func (fm *fakeMaster) accept() {
	defer fm.wg.Done()
	for {
		nc, err := fm.ln.Accept()
		if err != nil {
			return
		}
		fm.mu.Lock()
		fc := &fakeConn{fm: fm, index: len(fm.conns), nc: nc, gone: make(chan struct{})}
		fm.conns = append(fm.conns, fc)
		fm.mu.Unlock()
		fm.wg.Add(1)
		go fc.serve()
	}
}

// conn returns the i-th connection accepted, or nil.
func (fm *fakeMaster) conn(i int) *fakeConn {
	fm.mu.Lock()
	defer fm.mu.Unlock()
	if i < len(fm.conns) {
		return fm.conns[i]
	}
	return nil
}

// accepted returns how many connections the master accepted.
func (fm *fakeMaster) accepted() int {
	fm.mu.Lock()
	defer fm.mu.Unlock()
	return len(fm.conns)
}

// seenAll returns the commands read on every connection, in order per
// connection.
func (fm *fakeMaster) seenAll() []string {
	fm.mu.Lock()
	conns := append([]*fakeConn(nil), fm.conns...)
	fm.mu.Unlock()
	var all []string
	for _, fc := range conns {
		all = append(all, fc.commands()...)
	}
	return all
}

func (fc *fakeConn) commands() []string {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return append([]string(nil), fc.seen...)
}

// write sends raw bytes to the client (a reply, or a stray one).
func (fc *fakeConn) write(b string) error {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	_, err := io.WriteString(fc.nc, b)
	return err
}

// hangUp closes the connection with a reset, unread data dropped.
func (fc *fakeConn) hangUp() {
	if tc, ok := fc.nc.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	fc.nc.Close()
}

func (fc *fakeConn) serve() {
	fm := fc.fm
	defer fm.wg.Done()
	defer close(fc.gone)
	defer fc.nc.Close()
	up, err := redis.Dial("tcp", fm.upstream)
	if err != nil {
		fm.t.Errorf("fake master: dial %s: %v", fm.upstream, err)
		return
	}
	defer up.Close()
	r := bufio.NewReader(fc.nc)
	for {
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		name := strings.ToUpper(cmd[0])
		desc := name
		if len(cmd) > 1 {
			desc += " " + short(cmd[1])
		}
		if name == "EVALSHA" && len(cmd) > 3 {
			desc += " " + short(cmd[3]) // the first key
		}
		fc.mu.Lock()
		fc.seen = append(fc.seen, desc)
		fc.mu.Unlock()
		v := forward
		if fm.hook != nil {
			v = fm.hook(fc, cmd)
		}
		if v == hangUp {
			fc.hangUp()
			return
		}
		args := make([]any, len(cmd)-1)
		for i, a := range cmd[1:] {
			args[i] = a
		}
		reply, err := up.Do(cmd[0], args...)
		var re redis.Error
		if err != nil && !errors.As(err, &re) {
			return
		}
		if v == swallow {
			continue
		}
		if err != nil {
			reply = re
		}
		if fc.write(encodeReply(reply)) != nil {
			return
		}
	}
}

// short cuts an argument for the record of commands seen.
func short(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// readCommand reads one command, a RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not a command: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad command header %q", line)
	}
	cmd := make([]string, n)
	for i := range cmd {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(h, "$")))
		if err != nil || size < 0 {
			return nil, fmt.Errorf("bad bulk header %q", h)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		cmd[i] = string(b[:size])
	}
	return cmd, nil
}

// encodeReply writes a reply as redigo returned it back in RESP.
func encodeReply(v any) string {
	switch v := v.(type) {
	case nil:
		return "$-1\r\n"
	case string:
		return "+" + v + "\r\n"
	case []byte:
		return "$" + strconv.Itoa(len(v)) + "\r\n" + string(v) + "\r\n"
	case int64:
		return ":" + strconv.FormatInt(v, 10) + "\r\n"
	case redis.Error:
		return "-" + string(v) + "\r\n"
	case []any:
		s := "*" + strconv.Itoa(len(v)) + "\r\n"
		for _, e := range v {
			s += encodeReply(e)
		}
		return s
	default:
		panic(fmt.Sprintf("fake master: cannot encode %T", v))
	}
}
