package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	rsredigo "github.com/go-redsync/redsync/v4/redis/redigo"
	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	qlredigo "github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

const ttl = 10 * time.Second

// ttlSetter is a locker whose locks' TTL a cell can set after it is made
// (the default is ttl).
type ttlSetter interface {
	setTTL(d time.Duration)
}

// locker is one library, set up on the first n masters.
type locker interface {
	// lock takes key, waiting as long as ctx allows, and returns how to
	// release it.
	lock(ctx context.Context, key string) (unlock func(context.Context) error, err error)
	close()
}

type lib struct {
	name string
	// in lists the workloads the library runs in (their tags: seq, par,
	// scale, keys, handoff, degraded, allocs, busy, fresh, expiry, turns).
	in string
	// make returns the library on n masters, or nil when it cannot run
	// there (bsm/redislock has one master; the go-redis adapter's slot is
	// empty until its constructor is filled in).
	make func(e *env, n int) locker
}

func (l lib) runs(tag string) bool { return slices.Contains(strings.Fields(l.in), tag) }

// ours tells quorumlock's rows from the peers'.
func (l lib) ours() bool { return strings.HasPrefix(l.name, "quorumlock") }

const everywhere = "seq par scale keys handoff degraded allocs busy"

// The names the targets are judged on.
const (
	qlName        = "quorumlock"
	qlPooledName  = "quorumlock (pooled)"
	qlOwnPoolName = "quorumlock (own *redis.Pool)"
	qlGoRedisName = "quorumlock (go-redis adapter)"
	rsName        = "go-redsync"
	rsGoRedisName = "go-redsync (go-redis)"
	qlRueidisName = "quorumlock (rueidis adapter)"
	rsRueidisName = "go-redsync (rueidis)"
	qlValkeyName  = "quorumlock (valkey-go adapter)"
	rlName        = "bsm/redislock"
)

var libs = []lib{
	{qlName, everywhere + " fresh expiry turns", newQuorumlock},
	{qlPooledName, everywhere + " fresh", newQuorumlockPooled},
	{qlOwnPoolName, "seq par allocs busy fresh", newQuorumlockOwnPools},
	{qlGoRedisName, "seq par allocs busy handoff fresh", func(e *env, n int) locker {
		if newQuorumlockGoRedis == nil {
			return nil
		}
		return newQuorumlockGoRedis(e, n)
	}},
	{"quorumlock (fair)", "handoff turns", newQuorumlockFair},
	{rsName, "seq par scale keys handoff degraded allocs expiry turns", newRedsync},
	{rsGoRedisName, "seq par allocs", newRedsyncGoRedis},
	{qlRueidisName, "seq par allocs busy handoff fresh", newQuorumlockRueidis},
	{rsRueidisName, "seq par allocs", newRedsyncRueidis},
	{qlValkeyName, "seq par allocs busy handoff fresh", newQuorumlockValkey},
	{rlName, "seq par handoff", newRedislock},
	{floorName, "seq", newFloor},
	{floorReaderName, "seq", newFloorReader},
}

// newQuorumlockGoRedis is the slot for quorumlock through its go-redis v9
// adapter (the goredis/ module). Fill it from a file of its own, e.g.
//
//	func init() { newQuorumlockGoRedis = func(e *env, n int) locker { ... } }
//
// returning a *qlLocker whose Client runs on one go-redis client per
// master (e.addrs[:n], PoolSize 128 like the peers), and add the module
// to go.mod with a replace to ../goredis. While it is nil, the adapter's
// rows are left out and its targets read "not measured".
var newQuorumlockGoRedis func(e *env, n int) locker

const floorName = "floor: write all, read all"

type env struct {
	addrs     []string
	servers   []*redistest.Server // when the bench started the masters; nil with -masters
	metrics   map[string]float64  // figures the targets are judged on, by name
	duration  time.Duration
	hungCell  time.Duration // each cell of the degraded workload
	freshCell time.Duration // each cell of the fresh workload
	// contentionCell is each cell where clients contend for one key (the
	// handoff and turns workloads).
	contentionCell time.Duration
	quick          bool // fewer cells: only those the targets are judged on
	closers        []func()
	// errs counts every cell's errors (shared by the copies of env a
	// workload makes to change a cell's duration).
	errs *errorLog
}

func (e *env) close() {
	for _, c := range e.closers {
		c()
	}
}

// quorumlock with its defaults (pipelined), or on its pooled path.
type qlLocker struct {
	c    *redlock.Client
	opts []redlock.LockOption
	// try makes one attempt per lock (TryAcquire), so that every attempt
	// that fails is seen.
	try bool
	// attempts and acquired count the attempts of the locks it took and
	// those locks (Lock.Attempts), for attempts per acquisition.
	attempts, acquired atomic.Int64
}

// attemptCounter is a locker that counts the attempts its locks took.
type attemptCounter interface {
	counts() (attempts, acquired int64)
}

func (q *qlLocker) counts() (attempts, acquired int64) { return q.attempts.Load(), q.acquired.Load() }

func (q *qlLocker) setTTL(d time.Duration) { q.opts = append(q.opts, redlock.WithTTL(d)) }

func newQuorumlockFair(e *env, n int) locker {
	l := newQuorumlock(e, n).(*qlLocker)
	l.opts = append(l.opts, redlock.WithFair())
	return l
}

func newQuorumlockPooled(e *env, n int) locker {
	return newQuorumlockWith(e, n, qlredigo.WithPipelining(false))
}

func newQuorumlock(e *env, n int) locker { return newQuorumlockWith(e, n) }

// newQuorumlockOwnPools is quorumlock on plain redigo pools of the
// application's own (as go-redsync's), handed to redlock.New: they
// pipeline through their DialContext.
func newQuorumlockOwnPools(e *env, n int) locker {
	pools := make([]pool.Pool, n)
	for i := range pools {
		addr := e.addrs[i]
		p := &redigo.Pool{
			MaxIdle: 128,
			DialContext: func(ctx context.Context) (redigo.Conn, error) {
				return redigo.DialContext(ctx, "tcp", addr, redigo.DialReadTimeout(time.Second), redigo.DialWriteTimeout(time.Second))
			},
		}
		e.closers = append(e.closers, func() { p.Close() })
		pools[i] = p
	}
	c, err := qlredigo.New(pools)
	if err != nil {
		panic(err)
	}
	return &qlLocker{c: c, opts: []redlock.LockOption{redlock.WithTTL(ttl), redlock.WithWait(time.Hour)}}
}

// newQuorumlockAddrs is quorumlock on a Client built from the masters'
// addresses (redigo.NewFromAddrs), as most applications make it.
func newQuorumlockAddrs(e *env, n int, opts ...redlock.Option) locker {
	c, err := qlredigo.NewFromAddrs(e.addrs[:n], opts...)
	if err != nil {
		panic(err)
	}
	return &qlLocker{c: c, opts: []redlock.LockOption{redlock.WithTTL(ttl), redlock.WithWait(time.Hour)}}
}

func newQuorumlockWith(e *env, n int, opts ...redlock.Option) locker {
	pools := make([]pool.Pool, n)
	for i := range pools {
		p, err := pool.New(e.addrs[i], pool.WithMaxIdle(128))
		if err != nil {
			panic(err)
		}
		pools[i] = p
		e.closers = append(e.closers, func() { p.Close() })
	}
	c, err := qlredigo.New(pools, opts...)
	if err != nil {
		panic(err)
	}
	return &qlLocker{c: c, opts: []redlock.LockOption{redlock.WithTTL(ttl), redlock.WithWait(time.Hour)}}
}

func (q *qlLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	acquire := q.c.Acquire
	if q.try {
		acquire = q.c.TryAcquire
	}
	l, err := acquire(ctx, key, q.opts...)
	if err != nil {
		return nil, err
	}
	q.attempts.Add(int64(l.Attempts()))
	q.acquired.Add(1)
	return l.Release, nil
}

func (q *qlLocker) close() { q.c.Close() }

// go-redsync v4 on redigo pools, with its default retry delays (50-250ms)
// and unbounded tries.
type rsLocker struct {
	rs     *redsync.Redsync
	expiry time.Duration // 0: ttl
}

func (r *rsLocker) setTTL(d time.Duration) { r.expiry = d }

func newRedsync(e *env, n int) locker {
	pools := make([]rsredis.Pool, n)
	for i := range pools {
		addr := e.addrs[i]
		p := &redigo.Pool{
			MaxIdle: 128,
			Dial: func() (redigo.Conn, error) {
				return redigo.Dial("tcp", addr, redigo.DialReadTimeout(time.Second), redigo.DialWriteTimeout(time.Second))
			},
		}
		e.closers = append(e.closers, func() { p.Close() })
		pools[i] = rsredigo.NewPool(p)
	}
	return &rsLocker{rs: redsync.New(pools...)}
}

func (r *rsLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(cmp.Or(r.expiry, ttl)), redsync.WithTries(math.MaxInt32))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock failed")
		}
		return err
	}, nil
}

func (r *rsLocker) close() {}

// go-redsync v4 on go-redis v9 clients (its goredis adapter), the peer
// of quorumlock's go-redis adapter.
func newRedsyncGoRedis(e *env, n int) locker {
	pools := make([]rsredis.Pool, n)
	for i := range pools {
		rc := goredis.NewClient(&goredis.Options{Addr: e.addrs[i], PoolSize: 128})
		e.closers = append(e.closers, func() { rc.Close() })
		pools[i] = rsgoredis.NewPool(rc)
	}
	return &rsLocker{rs: redsync.New(pools...)}
}

// bsm/redislock on go-redis, single master, retrying every millisecond.
type rlLocker struct {
	c   *redislock.Client
	ttl time.Duration // 0: ttl
}

func (r *rlLocker) setTTL(d time.Duration) { r.ttl = d }

func newRedislock(e *env, n int) locker {
	if n != 1 {
		return nil
	}
	rc := goredis.NewClient(&goredis.Options{Addr: e.addrs[0], PoolSize: 128})
	e.closers = append(e.closers, func() { rc.Close() })
	return &rlLocker{c: redislock.New(rc)}
}

func (r *rlLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := r.c.Obtain(ctx, key, cmp.Or(r.ttl, ttl), &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)})
	if err != nil {
		return nil, fmt.Errorf("redislock: %w", err)
	}
	return l.Release, nil
}

func (r *rlLocker) close() {}

// floorLocker is no lock library but the least a client can do per cycle:
// from one goroutine, write SET NX PX to every master, then read every
// reply; likewise DEL. No token check, no timeouts, no early decision. Its
// p50 is the practical floor that the one-client target is judged beside.
type floorLocker struct {
	conns []net.Conn
	// read[i] returns master i's next reply line: straight off the
	// connection (newFloor), or from the goroutine that reads it
	// (newFloorReader).
	read []func() (string, error)
}

func newFloor(e *env, n int) locker {
	f := &floorLocker{}
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", e.addrs[i])
		if err != nil {
			panic(err)
		}
		rd := bufio.NewReader(c)
		f.conns = append(f.conns, c)
		f.read = append(f.read, func() (string, error) { return rd.ReadString('\n') })
	}
	return f
}

func (f *floorLocker) roundTrip(cmd []byte) error {
	for _, c := range f.conns {
		if _, err := c.Write(cmd); err != nil {
			return err
		}
	}
	for _, read := range f.read {
		line, err := read()
		if err != nil {
			return err
		}
		if line[0] == '-' {
			return errors.New(strings.TrimSpace(line))
		}
	}
	return nil
}

func (f *floorLocker) lock(_ context.Context, key string) (func(context.Context) error, error) {
	set := fmt.Sprintf("*6\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$5\r\ntoken\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n10000\r\n", len(key), key)
	if err := f.roundTrip([]byte(set)); err != nil {
		return nil, err
	}
	return func(context.Context) error {
		return f.roundTrip([]byte(fmt.Sprintf("*2\r\n$3\r\nDEL\r\n$%d\r\n%s\r\n", len(key), key)))
	}, nil
}

func (f *floorLocker) close() {
	for _, c := range f.conns {
		c.Close()
	}
}

// floorReaderName is the floor client with one change: each connection's
// replies are read by a goroutine of its own and handed to the caller on
// a channel, as a pipelining client's reader does. Its p50 beside the
// floor's is what that hand-off costs on this machine.
const floorReaderName = "floor, replies through a reader goroutine"

func newFloorReader(e *env, n int) locker {
	f := &floorLocker{}
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", e.addrs[i])
		if err != nil {
			panic(err)
		}
		ch := make(chan string, 16)
		f.conns = append(f.conns, c)
		f.read = append(f.read, func() (string, error) {
			line, ok := <-ch
			if !ok {
				return "", errors.New("floor: connection closed")
			}
			return line, nil
		})
		go func() {
			defer close(ch)
			rd := bufio.NewReader(c)
			for {
				line, err := rd.ReadString('\n')
				if err != nil {
					return
				}
				ch <- line
			}
		}()
	}
	return f
}
