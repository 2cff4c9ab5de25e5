package hostile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// A Proxy is a master on 127.0.0.1 that a test makes misbehave below the
// level of replies: it reads each command a client sends, lets the test's
// hook act on it, and unless told otherwise runs it on a real redis-server
// and relays the reply. Commands of one connection are handled one at a
// time, in order, as Redis does.
type Proxy struct {
	m        *master
	upstream string // the real master
	hook     Hook

	mu    sync.Mutex
	conns []*Conn
	locks []*Conn // the connections whose first command was not INFO
}

// A Hook acts on one command (its name upper-cased, then its arguments)
// read on c, before it runs, and says what the proxy does with it. It may
// write to c (a stray reply) or wait (a slow master), until c.Quit closes.
type Hook func(c *Conn, cmd []string) Verdict

// Verdict is what a Proxy does with one command.
type Verdict uint8

// The verdicts.
const (
	Forward Verdict = iota // run it on the real master and relay the reply
	Swallow                // run it, send no reply
	HangUp                 // reset the connection without running it
	// Drop neither runs it nor replies: the hook ran it, or answered it,
	// itself (a reply the hook wrote and then a Swallow would run the
	// command twice, the second time after what the client sent once it
	// read that reply).
	Drop
)

// Conn is one client connection of a Proxy.
type Conn struct {
	// Index is 0 for the first connection the proxy accepted, 1 for the
	// next...
	Index int
	// LockIndex numbers the connections that carry a client's lock
	// commands: 0, 1... in the order their first command arrived, leaving
	// out those whose first command is INFO (a redlock client's identity
	// probe at first contact, on a connection of its pool); -1 for those.
	// Set before the hook sees the first command.
	LockIndex int

	nc   net.Conn
	quit <-chan struct{}
	wmu  sync.Mutex    // serialises writes to the client
	gone chan struct{} // closed when the connection has ended

	mu   sync.Mutex
	seen []string // the commands read, as "NAME arg1"
}

// NewProxy starts a proxy in front of the redis-server at upstream; a nil
// hook forwards everything. It stops when the test ends.
func NewProxy(t testing.TB, upstream string, hook Hook) *Proxy {
	t.Helper()
	p := &Proxy{upstream: upstream, hook: hook}
	p.m = listen(t, func(nc net.Conn, quit <-chan struct{}) func() {
		p.mu.Lock()
		c := &Conn{Index: len(p.conns), nc: nc, quit: quit, gone: make(chan struct{})}
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		return func() { p.serve(t, c) }
	})
	return p
}

// Addr returns the proxy's address.
func (p *Proxy) Addr() string { return p.m.ln.Addr().String() }

// Conn returns the i-th connection accepted, or nil.
func (p *Proxy) Conn(i int) *Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < len(p.conns) {
		return p.conns[i]
	}
	return nil
}

// LockConn returns the connection whose LockIndex is i, or nil.
func (p *Proxy) LockConn(i int) *Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < len(p.locks) {
		return p.locks[i]
	}
	return nil
}

// Accepted returns how many connections the proxy accepted.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Seen returns the commands read on every connection, in order per
// connection, each as "NAME arg1" (and the first key of an EVALSHA).
func (p *Proxy) Seen() []string {
	p.mu.Lock()
	conns := append([]*Conn(nil), p.conns...)
	p.mu.Unlock()
	var all []string
	for _, c := range conns {
		all = append(all, c.Commands()...)
	}
	return all
}

// Commands returns the commands read on c, as Proxy.Seen does.
func (c *Conn) Commands() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

// Write sends raw bytes to the client (a reply, or a stray one).
func (c *Conn) Write(b string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := io.WriteString(c.nc, b)
	return err
}

// Gone is closed when the connection has ended.
func (c *Conn) Gone() <-chan struct{} { return c.gone }

// Quit is closed when the test ends: a hook that waits must stop then.
func (c *Conn) Quit() <-chan struct{} { return c.quit }

// hangUp closes the connection with a reset, unread data dropped.
func (c *Conn) hangUp() {
	if tc, ok := c.nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.nc.Close()
}

func (p *Proxy) serve(t testing.TB, c *Conn) {
	defer close(c.gone)
	defer c.nc.Close() // before gone closes
	up, err := redis.Dial("tcp", p.upstream)
	if err != nil {
		// The master is down (a test restarting it): the client sees the
		// connection close, as it would on the master's own port.
		t.Logf("hostile proxy: dial %s: %v; closing the client's connection", p.upstream, err)
		return
	}
	defer up.Close()
	r := bufio.NewReader(c.nc)
	for first := true; ; first = false {
		cmd, err := ReadCommand(r)
		if err != nil || len(cmd) == 0 {
			return
		}
		if first {
			p.mu.Lock()
			c.LockIndex = -1
			if cmd[0] != "INFO" {
				c.LockIndex = len(p.locks)
				p.locks = append(p.locks, c)
			}
			p.mu.Unlock()
		}
		desc := cmd[0]
		if len(cmd) > 1 {
			desc += " " + short(cmd[1])
		}
		if cmd[0] == "EVALSHA" && len(cmd) > 3 {
			desc += " " + short(cmd[3]) // the first key
		}
		c.mu.Lock()
		c.seen = append(c.seen, desc)
		c.mu.Unlock()
		v := Forward
		if p.hook != nil {
			v = p.hook(c, cmd)
		}
		if v == HangUp {
			c.hangUp()
			return
		}
		if v == Drop {
			continue
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
		if v == Swallow {
			continue
		}
		if err != nil {
			reply = re
		}
		if c.Write(EncodeReply(reply)) != nil {
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

// EncodeReply writes a reply, as redigo returns it, back in RESP.
func EncodeReply(v any) string {
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
			s += EncodeReply(e)
		}
		return s
	default:
		panic(fmt.Sprintf("hostile proxy: cannot encode %T", v))
	}
}

// Hold waits d, or until quit closes: how a hook makes a master slow
// without outliving its test.
func Hold(d time.Duration, quit <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-quit:
	}
}
