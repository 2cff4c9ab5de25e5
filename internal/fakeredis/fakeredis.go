// Package fakeredis is an in-memory stand-in for a Redis master, driven by
// a fake clock, for unit tests of the quorum logic: early decisions,
// impossible quorums, late replies, drift arithmetic. It understands only
// the commands quorumlock sends (SET NX PX, GET, DEL, PTTL, EXISTS and the
// scripts of internal/scripts by EVALSHA or EVAL).
//
// It is never a replacement for tests against real Redis.
package fakeredis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// ErrDown is returned by GetContext of a master that is down.
var ErrDown = errors.New("fakeredis: connection refused")

// timeoutError looks like a net.Error timeout, as a redigo read deadline
// gives.
type timeoutError struct{}

func (timeoutError) Error() string   { return "fakeredis: i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// Master is one fake master. Its zero value is not usable; use New.
type Master struct {
	clock clock.Clock
	addr  string

	mu        sync.Mutex
	data      map[string]entry
	scripts   map[string]*scripts.Script // by SHA, what EVALSHA finds
	delay     time.Duration              // reply delay; the command runs at once
	hung      chan struct{}              // while not nil, commands wait for it to close
	down      bool
	replyErr  error
	breakNext bool // the next command runs, then its connection breaks
	calls     map[string]int
	drop      map[string]string // script name -> key deleted before its next run
}

type entry struct {
	val string
	exp time.Time // zero: no expiry
}

// New returns an empty fake master at addr, on clk.
func New(clk clock.Clock, addr string) *Master {
	return &Master{clock: clk, addr: addr, data: map[string]entry{},
		scripts: map[string]*scripts.Script{}, calls: map[string]int{}}
}

// Addr returns the address given to New.
func (m *Master) Addr() string { return m.addr }

// SetDelay makes replies arrive d after each command ran (on the fake
// clock); the command itself takes effect at once, like a reply lost in a
// slow network.
func (m *Master) SetDelay(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.delay = d
}

// Hang makes every command wait, before it runs, until Resume.
func (m *Master) Hang() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hung == nil {
		m.hung = make(chan struct{})
	}
}

// Resume lets hung commands run.
func (m *Master) Resume() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hung != nil {
		close(m.hung)
		m.hung = nil
	}
}

// SetDown makes GetContext fail with ErrDown.
func (m *Master) SetDown(down bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = down
}

// SetReplyError makes every command answer err (nil to stop).
func (m *Master) SetReplyError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.replyErr = err
}

// BreakNextReply makes the next command run and then fail with io.EOF, as
// when a connection breaks between the command and its reply.
func (m *Master) BreakNextReply() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.breakNext = true
}

// FlushScripts empties the script cache, as a restart does.
func (m *Master) FlushScripts() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.scripts)
}

// Get returns the value of key and whether it exists.
func (m *Master) Get(key string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.lookup(key)
	return e.val, ok
}

// Set stores key with a TTL (0: none), as another client would.
func (m *Master) Set(key, val string, ttl time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := entry{val: val}
	if ttl > 0 {
		e.exp = m.clock.Now().Add(ttl)
	}
	m.data[key] = e
}

// Keys returns how many live keys the master holds.
func (m *Master) Keys() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for k := range m.data {
		if _, ok := m.lookup(k); ok {
			n++
		}
	}
	return n
}

// Calls returns how many times cmd (upper case; a script by its name) was
// run.
func (m *Master) Calls(cmd string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[cmd]
}

// GetContext returns a connection to the fake master.
func (m *Master) GetContext(ctx context.Context) (redis.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, ErrDown
	}
	return &conn{m: m}, nil
}

func (m *Master) lookup(key string) (entry, bool) {
	e, ok := m.data[key]
	if ok && !e.exp.IsZero() && !m.clock.Now().Before(e.exp) {
		delete(m.data, key)
		return entry{}, false
	}
	return e, ok
}

// conn is one connection; it supports redis.ConnWithTimeout.
type conn struct {
	m   *Master
	err error
}

var _ redis.ConnWithTimeout = (*conn)(nil)

func (c *conn) Close() error { return nil }
func (c *conn) Err() error   { return c.err }
func (c *conn) Do(cmd string, args ...any) (any, error) {
	return c.DoWithTimeout(0, cmd, args...)
}
func (c *conn) Send(string, ...any) error { return errors.New("fakeredis: Send not supported") }
func (c *conn) Flush() error              { return errors.New("fakeredis: Flush not supported") }
func (c *conn) Receive() (any, error)     { return nil, errors.New("fakeredis: Receive not supported") }
func (c *conn) ReceiveWithTimeout(time.Duration) (any, error) {
	return nil, errors.New("fakeredis: Receive not supported")
}

// DoWithTimeout runs cmd, waiting on the fake clock for a hung master or a
// delayed reply; past timeout (0: none) it fails like a read deadline and
// the connection is broken.
func (c *conn) DoWithTimeout(timeout time.Duration, cmd string, args ...any) (any, error) {
	if c.err != nil {
		return nil, c.err
	}
	if strings.EqualFold(cmd, "INFO") {
		// The client's first-contact identity probe (run_id) is tested on
		// real Redis; here it is answered at once, past every injected
		// fault, so that it takes none of a test's timers, delays or
		// broken replies, which are meant for the lock's commands.
		return nil, redis.Error("ERR unknown command 'INFO' (fakeredis)")
	}
	m := c.m
	m.mu.Lock()
	hung, delay := m.hung, m.delay
	m.mu.Unlock()
	// The deadline timer exists only while the command has to wait, so
	// that a test can count the commands that are waiting.
	var deadline <-chan time.Time
	if timeout > 0 && (hung != nil || delay > 0) {
		t := m.clock.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C()
	}
	if hung != nil {
		select {
		case <-hung:
		case <-deadline:
			c.err = timeoutError{}
			return nil, c.err
		}
	}
	m.mu.Lock()
	res, err := m.run(strings.ToUpper(cmd), args)
	if m.breakNext {
		m.breakNext = false
		res, err = nil, io.EOF
		c.err = err
	}
	m.mu.Unlock()
	if delay > 0 {
		t := m.clock.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C():
		case <-deadline:
			c.err = timeoutError{}
			return nil, c.err
		}
	}
	return res, err
}

func (m *Master) run(cmd string, args []any) (any, error) {
	if m.replyErr != nil {
		return nil, m.replyErr
	}
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = fmt.Sprint(a)
	}
	switch cmd {
	case "EVALSHA":
		sc, ok := m.scripts[s[0]]
		if !ok {
			return nil, redis.Error("NOSCRIPT No matching script. Please use EVAL.")
		}
		return m.script(sc, s[2:])
	case "EVAL":
		sum := sha1.Sum([]byte(s[0]))
		sha := hex.EncodeToString(sum[:])
		for _, sc := range fakeScripts {
			if sc.SHA() == sha {
				m.scripts[sha] = sc
				return m.script(sc, s[2:])
			}
		}
		return nil, redis.Error("ERR fakeredis does not know this script")
	}
	m.calls[cmd]++
	switch cmd {
	case "SET":
		return m.set(s)
	case "GET":
		if e, ok := m.lookup(s[0]); ok {
			return []byte(e.val), nil
		}
		return nil, nil
	case "DEL":
		_, ok := m.lookup(s[0])
		delete(m.data, s[0])
		return boolInt(ok), nil
	case "EXISTS":
		_, ok := m.lookup(s[0])
		return boolInt(ok), nil
	case "PTTL":
		e, ok := m.lookup(s[0])
		switch {
		case !ok:
			return int64(-2), nil
		case e.exp.IsZero():
			return int64(-1), nil
		}
		return e.exp.Sub(m.clock.Now()).Milliseconds(), nil
	case "PING":
		return "PONG", nil
	}
	return nil, redis.Error("ERR fakeredis: unknown command " + cmd)
}

// set handles SET key val [NX] [PX ms].
func (m *Master) set(s []string) (any, error) {
	key, val := s[0], s[1]
	nx := false
	var ttl time.Duration
	for i := 2; i < len(s); i++ {
		switch strings.ToUpper(s[i]) {
		case "NX":
			nx = true
		case "PX":
			i++
			ms, err := strconv.ParseInt(s[i], 10, 64)
			if err != nil || ms <= 0 {
				return nil, redis.Error("ERR invalid expire time in 'set' command")
			}
			ttl = time.Duration(ms) * time.Millisecond
		default:
			return nil, redis.Error("ERR syntax error")
		}
	}
	if _, ok := m.lookup(key); ok && nx {
		return nil, nil
	}
	e := entry{val: val}
	if ttl > 0 {
		e.exp = m.clock.Now().Add(ttl)
	}
	m.data[key] = e
	return "OK", nil
}

// fakeScripts are the scripts the fake master knows.
var fakeScripts = []*scripts.Script{scripts.Release, scripts.Extend, scripts.FencedAcquire, scripts.FenceCommit, scripts.WaitAcquire}

// DropBefore deletes key just before the next run of the script named
// name (a lock that expired or was lost between two commands).
func (m *Master) DropBefore(name, key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.drop == nil {
		m.drop = map[string]string{}
	}
	m.drop[name] = key
}

// script runs the Go equivalent of one of internal/scripts.
func (m *Master) script(sc *scripts.Script, s []string) (any, error) {
	m.calls[sc.Name()]++
	if key, ok := m.drop[sc.Name()]; ok {
		delete(m.drop, sc.Name())
		delete(m.data, key)
	}
	switch sc {
	case scripts.WaitAcquire: // lock; token, ttl
		// It runs SET NX PX, counted as a SET: tests count attempts so.
		m.calls["SET"]++
		ok, err := m.set([]string{s[0], s[1], "NX", "PX", s[2]})
		if err != nil || ok != nil {
			return ok, err
		}
		return m.run("PTTL", []any{s[0]})
	case scripts.FencedAcquire: // lock, counter; token, ttl
		ok, err := m.set([]string{s[0], s[2], "NX", "PX", s[3]})
		if err != nil || ok == nil {
			return int64(0), err
		}
		if c, ok := m.lookup(s[1]); ok {
			return []byte(c.val), nil
		}
		return []byte("0"), nil
	case scripts.FenceCommit: // lock, counter; token, fence
		if e, ok := m.lookup(s[0]); !ok || e.val != s[2] {
			return int64(0), nil
		}
		cur, _ := m.lookup(s[1])
		have, _ := strconv.ParseUint(cur.val, 10, 64)
		if want, _ := strconv.ParseUint(s[3], 10, 64); want > have {
			m.data[s[1]] = entry{val: s[3]}
		}
		return int64(1), nil
	}
	key, token := s[0], s[1]
	e, ok := m.lookup(key)
	if !ok || e.val != token {
		return int64(0), nil
	}
	switch sc {
	case scripts.Release:
		delete(m.data, key)
	case scripts.Extend:
		ms, err := strconv.ParseInt(s[2], 10, 64)
		if err != nil || ms <= 0 {
			return nil, redis.Error("ERR invalid expire time")
		}
		e.exp = m.clock.Now().Add(time.Duration(ms) * time.Millisecond)
		m.data[key] = e
	}
	return int64(1), nil
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
