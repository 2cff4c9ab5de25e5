package sim

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/quorumlock/quorumlock/transport"
)

// A Master is one simulated Redis master: a keyspace whose keys expire by
// the master's own clock (a rate and jumps on the virtual clock), the
// lock's Lua scripts run in gopher-lua over it, a script cache, pub/sub,
// and the faults a simulation puts on it: frozen (commands wait in its
// sockets and run when it resumes, connections in no fixed order), down
// (crashed: connections reset, nothing runs), restarted with or without
// its last second of writes (appendfsync always or everysec), a new
// run_id and an empty script cache. Safe for concurrent use.
type Master struct {
	addr string

	mu        sync.Mutex
	rng       *rand.Rand
	ks        *keyspace
	vm        *luaVM
	scripts   map[string]*lua.FunctionProto // the script cache (EVALSHA)
	everysec  bool                          // a crash loses the writes since the last whole second
	reorder   bool                          // a resumed master reads its connections in no fixed order
	persisted map[string]*value             // what an everysec crash restarts with
	savedAt   int64
	state     masterState
	frozen    []*request
	gen       uint64 // incarnation, counted up at each crash
	runID     string

	// The master's clock: baseM (ns) at virtual time baseV, running at rate.
	rate  float64
	baseV time.Time
	baseM int64

	subs map[string]map[*subscription]struct{}

	// in, while Serve runs, takes the requests Do delivers to the
	// master's own goroutine (whose stack has grown to what the Lua
	// interpreter needs once, not in every goroutine a delivery runs in).
	conns   atomic.Uint64 // connection ids, unique per master
	in      chan *request
	stopped chan struct{}

	weather weather // the network to and from the master, per command

	// onGrant, when set, is called (with the master's lock held) for
	// each SET key token NX PX ttl that set the key.
	onGrant func(key, token string, ttl time.Duration)
	// onLateSet, when set, is called (with the master's lock held) for a
	// SET key token NX PX that set the key on a connection on which the
	// release script had run for token before: the Client sent the SET
	// after its release or rollback, on one ordered connection.
	onLateSet func(key, token string)
	released  map[string]uint64 // token -> the connection a release of it ran on
	// trace, when set, is told of every command the master runs on a
	// key, and its reply (with the master's lock held).
	trace func(key string, args []string, reply any, err error)
}

type masterState uint8

const (
	stateUp masterState = iota
	stateFrozen
	stateDown
)

// weather is what the network does to one command of a master: delays
// drawn up to a bound, and chances to drop a request or a reply, to
// deliver a reply after the caller's deadline, or (a transport fault) to
// complete a command twice.
type weather struct {
	Delay      time.Duration // each way, drawn from [0, delay]
	DropReq    float64
	DropReply  float64
	LateReply  float64
	AtDeadline float64 // the reply comes at the command's deadline to the nanosecond (a race with the caller's timer)
	// AtDeadlineSet is AtDeadline for a plain acquisition's SET: a
	// woken waiter's round sends its other SETs when the lead's reply
	// comes, and that reply racing the round's timer is where a
	// decision meets a send.
	AtDeadlineSet float64
	DupComplete   float64
}

// request is one command as it reaches a master on a connection.
type request struct {
	conn uint64 // the connection (unique per master and incarnation)
	gen  uint64 // the master's incarnation the connection was dialled to
	args []string
	// batch, instead of args, is several commands run at once, whose
	// replies (an error reply in its place) are the reply.
	batch [][]string
	done  func(reply any, err error) // called without the master's lock
}

// errReset is a connection broken under a command (the master crashed):
// the command may or may not have run.
type connError struct{ msg string }

func (e *connError) Error() string { return e.msg }

// NewMaster returns a master named addr whose clock starts at the
// virtual now; rng draws its run_ids and the order in which its
// connections are read after a freeze.
func NewMaster(addr string, rng *rand.Rand, everysec bool) *Master {
	m := &Master{addr: addr, rng: rng, everysec: everysec, rate: 1, baseV: time.Now(), baseM: time.Now().UnixNano(),
		subs: map[string]map[*subscription]struct{}{}}
	m.start(newKeyspace().data)
	return m
}

func (m *Master) start(data map[string]*value) {
	m.ks = &keyspace{data: data}
	m.vm = newLuaVM(m)
	m.scripts = map[string]*lua.FunctionProto{}
	m.runID = fmt.Sprintf("%016x%016x%08x", m.rng.Uint64(), m.rng.Uint64(), m.rng.Uint32())
	m.persisted = m.ks.clone()
	m.savedAt = m.nowMsLocked()
	m.state = stateUp
}

// connID returns a new connection's id.
func (m *Master) connID() uint64 { return m.conns.Add(1) }

// Addr returns the master's name.
func (m *Master) Addr() string { return m.addr }

func (m *Master) nowNsLocked() int64 {
	return m.baseM + int64(float64(time.Since(m.baseV))*m.rate)
}

func (m *Master) nowMsLocked() int64 { return m.nowNsLocked() / int64(time.Millisecond) }

// SetRate makes the master's clock run at rate times the virtual clock
// from now on.
func (m *Master) SetRate(rate float64) {
	m.mu.Lock()
	m.baseM, m.baseV, m.rate = m.nowNsLocked(), time.Now(), rate
	m.mu.Unlock()
}

// SetNow sets the master's clock to t.
func (m *Master) SetNow(t time.Time) {
	m.mu.Lock()
	m.baseM, m.baseV = t.UnixNano(), time.Now()
	m.mu.Unlock()
}

// Jump moves the master's clock by d (a wall-clock step).
func (m *Master) Jump(d time.Duration) {
	m.mu.Lock()
	m.baseM, m.baseV = m.nowNsLocked()+int64(d), time.Now()
	m.mu.Unlock()
}

// SetWeather sets what the network does to the master's commands.
func (m *Master) SetWeather(w weather) {
	m.mu.Lock()
	m.weather = w
	m.mu.Unlock()
}

func (m *Master) currentWeather() weather {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.weather
}

// Freeze stops the master: commands wait until Resume.
func (m *Master) Freeze() {
	m.mu.Lock()
	if m.state == stateUp {
		m.state = stateFrozen
	}
	m.mu.Unlock()
}

// Resume runs what waited during a freeze — each connection's commands
// in order; the connections in the order their first command arrived or,
// with reorder, in an order of the master's rng, as redis-server reads
// the sockets it finds readable — and serves again.
func (m *Master) Resume() {
	m.mu.Lock()
	if m.state != stateFrozen {
		m.mu.Unlock()
		return
	}
	m.state = stateUp
	q := m.frozen
	m.frozen = nil
	// Interleave the connections at random, keeping each one's order.
	byConn := map[uint64][]*request{}
	var conns []uint64
	for _, r := range q {
		if _, ok := byConn[r.conn]; !ok {
			conns = append(conns, r.conn)
		}
		byConn[r.conn] = append(byConn[r.conn], r)
	}
	var calls []func()
	for len(conns) > 0 {
		i := 0
		if m.reorder {
			i = m.rng.IntN(len(conns))
		}
		c := conns[i]
		r := byConn[c][0]
		byConn[c] = byConn[c][1:]
		if len(byConn[c]) == 0 {
			conns = append(conns[:i], conns[i+1:]...)
		}
		reply, err := m.execLocked(r)
		calls = append(calls, func() { r.done(reply, err) })
	}
	m.mu.Unlock()
	for _, f := range calls {
		f()
	}
}

// Crash kills the master: commands waiting in it fail as a reset
// connection, its subscriptions break, nothing runs until Restart.
func (m *Master) Crash() {
	m.mu.Lock()
	if m.state == stateDown {
		m.mu.Unlock()
		return
	}
	m.state = stateDown
	m.gen++
	q := m.frozen
	m.frozen = nil
	var subs []*subscription
	for _, set := range m.subs {
		for s := range set {
			subs = append(subs, s)
		}
	}
	m.subs = map[string]map[*subscription]struct{}{}
	m.mu.Unlock()
	for _, r := range q {
		r.done(nil, &connError{"read: connection reset by peer"})
	}
	for _, s := range subs {
		s.broke()
	}
}

// Restart starts a crashed master: with its data as it was (appendfsync
// always) or, for an everysec master, as it was at its last whole second
// (lose reports which).
func (m *Master) Restart() (lost bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != stateDown {
		return false
	}
	data := m.ks.data
	if m.everysec {
		data, lost = m.persisted, true
	}
	m.start(data)
	return lost
}

// Up reports whether the master is up (not frozen or down).
func (m *Master) Up() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state == stateUp
}

func (m *Master) generation() (uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen, m.state != stateDown
}

// Serve runs the master's commands on a goroutine of its own until Stop:
// Do then hands them over in the order it was called.
func (m *Master) Serve() {
	in := make(chan *request, 4096)
	stopped := make(chan struct{})
	m.mu.Lock()
	m.in, m.stopped = in, stopped
	m.mu.Unlock()
	go func() {
		for r := range in {
			if r == nil {
				break
			}
			m.do(r)
		}
		m.mu.Lock()
		m.in = nil
		m.mu.Unlock()
		for {
			select {
			case r := <-in:
				m.do(r)
			default:
				close(stopped)
				return
			}
		}
	}()
}

// Stop ends Serve: Do runs commands in its caller again.
func (m *Master) Stop() {
	m.mu.Lock()
	in, stopped := m.in, m.stopped
	m.mu.Unlock()
	if in != nil {
		in <- nil
		<-stopped
	}
}

// Do delivers r to the master: it runs now, or when a frozen master
// resumes, or fails when the master is down or restarted since r's
// connection was dialled.
func (m *Master) Do(r *request) {
	m.mu.Lock()
	in := m.in
	m.mu.Unlock()
	if in != nil {
		in <- r
		return
	}
	m.do(r)
}

func (m *Master) do(r *request) {
	m.mu.Lock()
	if m.state == stateDown || r.gen != m.gen {
		m.mu.Unlock()
		r.done(nil, &connError{"write: connection reset by peer"})
		return
	}
	if m.state == stateFrozen {
		m.frozen = append(m.frozen, r)
		m.mu.Unlock()
		return
	}
	reply, err := m.execLocked(r)
	m.mu.Unlock()
	r.done(reply, err)
}

// Exec runs one command at once, whatever the master's state (for the
// differential test and for checks).
func (m *Master) Exec(args ...string) (any, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.execLocked(&request{args: args})
}

func (m *Master) execLocked(r *request) (any, error) {
	if r.batch != nil {
		out := make([]any, len(r.batch))
		for i, args := range r.batch {
			v, err := m.execLocked(&request{conn: r.conn, gen: r.gen, args: args})
			if err != nil {
				v = err
			}
			out[i] = v
		}
		return out, nil
	}
	now := m.nowMsLocked()
	m.ks.now = now
	if m.everysec && now/1000 != m.savedAt/1000 {
		m.persisted, m.savedAt = m.ks.clone(), now
	}
	a := r.args
	switch strings.ToUpper(a[0]) {
	case "EVALSHA", "EVAL":
		if len(a) < 3 {
			return nil, errArgs(a[0])
		}
		var sha string
		var proto *lua.FunctionProto
		if strings.EqualFold(a[0], "EVAL") {
			var err error
			if sha, proto, err = compile(a[1]); err != nil {
				return nil, err
			}
			m.scripts[sha] = proto
		} else {
			sha = strings.ToLower(a[1])
			if proto = m.scripts[sha]; proto == nil {
				return nil, ReplyError("NOSCRIPT No matching script. Please use EVAL.")
			}
		}
		n, err := strconv.Atoi(a[2])
		if err != nil || n < 0 {
			return nil, errNotInt
		}
		if n > len(a)-3 {
			return nil, ReplyError("ERR Number of keys can't be greater than number of args")
		}
		if m.onLateSet != nil && n == 1 && len(a) > 4 && scriptNames[sha] == "release" {
			if m.released == nil {
				m.released = map[string]uint64{}
			}
			m.released[a[4]] = r.conn
		}
		reply, err := m.vm.run(m.ks, sha, proto, a[3:3+n], a[3+n:])
		if m.trace != nil && n > 0 {
			m.trace(a[3], a, reply, err)
		}
		return reply, err
	case "SCRIPT":
		if len(a) == 3 && strings.EqualFold(a[1], "LOAD") {
			sha, proto, err := compile(a[2])
			if err != nil {
				return nil, err
			}
			m.scripts[sha] = proto
			return []byte(sha), nil
		}
		if len(a) == 2 && a[1] == "LOAD-ALL" {
			for _, s := range transport.Scripts() {
				sha, proto, err := compile(s.Source())
				if err != nil {
					return nil, err
				}
				m.scripts[sha] = proto
			}
			return status("OK"), nil
		}
		return nil, errSyntax
	case "INFO":
		return []byte("# Server\r\nredis_version:7.0.15\r\nrun_id:" + m.runID + "\r\n"), nil
	}
	reply, err := m.ks.exec(m, a)
	if m.trace != nil && len(a) > 1 {
		m.trace(a[1], a, reply, err)
	}
	if m.onGrant != nil && reply == "OK" && len(a) == 6 && strings.EqualFold(a[3], "NX") && strings.EqualFold(a[4], "PX") {
		if ms, err := strconv.ParseInt(a[5], 10, 64); err == nil {
			m.onGrant(a[1], a[2], time.Duration(ms)*time.Millisecond)
		}
		if c, ok := m.released[a[2]]; ok && c == r.conn && m.onLateSet != nil && r.conn != 0 {
			m.onLateSet(a[1], a[2])
		}
	}
	return reply, err
}

// PTTL returns the key's remaining time to live in milliseconds, as
// Redis's PTTL answers it (-2 for no key, -1 for no TTL), for checks.
func (m *Master) PTTL(key string) int64 {
	v, _ := m.Exec("PTTL", key)
	n, _ := v.(int64)
	return n
}

// publish sends payload to channel's subscribers; it returns how many.
// Called with the master's lock held.
func (m *Master) publish(channel, payload string) int64 {
	set := m.subs[channel]
	for s := range set {
		s.push(channel, payload)
	}
	return int64(len(set))
}

func (m *Master) numSub(channel string) int64 { return int64(len(m.subs[channel])) }

// subscribe makes s's channels at the master equal to channels; false
// when the master is down.
func (m *Master) subscribe(s *subscription, old, channels []string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == stateDown || s.gen != m.gen {
		return false
	}
	for _, ch := range old {
		delete(m.subs[ch], s)
		if len(m.subs[ch]) == 0 {
			delete(m.subs, ch)
		}
	}
	for _, ch := range channels {
		if m.subs[ch] == nil {
			m.subs[ch] = map[*subscription]struct{}{}
		}
		m.subs[ch][s] = struct{}{}
	}
	return true
}
