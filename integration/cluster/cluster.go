// Package cluster starts N independent Redis masters for a test and lets
// the test break them: pause (a hung process), kill (a crash), stop (a clean
// shutdown), restart with or without persistence, and partition (the
// client can no longer reach the master). Use it to test your own code
// against the failures a Redlock client must survive.
//
// Two backends run the masters:
//
//   - Docker (the default when a Docker engine answers), through
//     github.com/ory/dockertest/v3. Each master is a container on a network
//     of its own cluster, with its port published on 127.0.0.1 only. The
//     image is DefaultImage, or the one named by $QUORUMLOCK_REDIS_IMAGE or
//     WithImage. Without a registry, build a local image from Debian's
//     redis-server with `make redis-image` (integration/image/build.sh) and
//     set QUORUMLOCK_REDIS_IMAGE=quorumlock/redis:local.
//   - Process: redis-server processes on 127.0.0.1, for machines without
//     Docker. It cannot partition: Partition reports ErrUnsupported, and
//     tests skip such cases with that reason.
//
// $QUORUMLOCK_BACKEND (docker or process) or WithBackend chooses. Masters
// are removed by t.Cleanup; a test binary that dies leaves containers that
// the next Start removes (each carries its owner's process ID), and
// processes that die with it.
package cluster

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/clockfault"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

// Environment variables read by Start.
const (
	ImageEnv   = "QUORUMLOCK_REDIS_IMAGE"
	BackendEnv = "QUORUMLOCK_BACKEND"
)

// DefaultImage is the image the Docker backend runs when neither
// $QUORUMLOCK_REDIS_IMAGE nor WithImage names one.
const DefaultImage = "redis:7.2"

// LocalImage is the image `make redis-image` builds.
const LocalImage = "quorumlock/redis:local"

// Backend is what runs the masters.
type Backend string

// The backends.
const (
	Docker  Backend = "docker"
	Process Backend = "process"
)

// ErrUnsupported is returned by a fault control the backend cannot do.
var ErrUnsupported = errors.New("cluster: not supported by this backend")

// Option configures Start.
type Option func(*config)

type config struct {
	backend Backend
	image   string
	noPull  bool
	aof     bool
	clocks  bool
	extra   []string
	// replicas is the number of replicas per primary of a Redis Cluster
	// (StartRedisClusters only).
	replicas int
	// portArgs, when set, gives a master's extra arguments once its
	// published port is known (a cluster node announces it).
	portArgs func(hostPort int) []string
	// samePort makes a container listen on its published port, not 6379,
	// so the port a cluster node announces reaches it both from
	// 127.0.0.1 and from the other containers (a replica connects to its
	// primary at the primary's address on the network and announced
	// port).
	samePort bool
}

// WithBackend chooses the backend; by default $QUORUMLOCK_BACKEND, else
// Docker when an engine answers, else Process.
func WithBackend(b Backend) Option { return func(c *config) { c.backend = b } }

// WithImage sets the Docker image ("name:tag"); by default
// $QUORUMLOCK_REDIS_IMAGE, else LocalImage when it has been built, else
// DefaultImage.
func WithImage(ref string) Option { return func(c *config) { c.image = ref } }

// WithoutPull makes a missing image an error at once, without asking the
// Docker engine to pull it from a registry.
func WithoutPull() Option { return func(c *config) { c.noPull = true } }

// WithAOF makes the masters persist every write before answering
// (appendonly yes, appendfsync always), so a killed and restarted master
// keeps its locks. Without it a restarted master comes back empty.
func WithAOF() Option { return func(c *config) { c.aof = true } }

// WithClockFaults starts every master under a clock it can be made to run
// fast or slow, or jump (Master.SetClockRate, Master.JumpClock): a preload
// library that changes the process's wall clock only, which Redis expires
// keys by (package internal/clockfault, docs/testing.md). It needs a C
// compiler, to build that library once, and the process backend: with
// Docker, Start fails saying so.
func WithClockFaults() Option { return func(c *config) { c.clocks = true } }

// WithReplicas gives every primary of a Redis Cluster started by
// StartRedisClusters r replicas (CLUSTER REPLICATE), each a node of its
// own like a primary, with the same fault controls, announcing 127.0.0.1
// as primaries do. RedisCluster.Failover promotes one. Start ignores it.
func WithReplicas(r int) Option { return func(c *config) { c.replicas = r } }

// WithConfig passes "--name values..." to every redis-server.
func WithConfig(name string, values ...string) Option {
	return func(c *config) { c.extra = append(append(c.extra, "--"+name), values...) }
}

func (c *config) redisArgs() []string {
	args := []string{"--save", ""}
	if c.aof {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	return append(args, c.extra...)
}

// node is one master as a backend runs it.
type node interface {
	addr() string
	pause() error
	resume() error
	kill() error
	stop() error
	start() error
	partition() error
	heal() error
	clock() *clockfault.Clock // nil without WithClockFaults
	// logs returns the node's last log lines, each on a line of its own
	// and indented, for an error message.
	logs() string
}

// Cluster is a set of independent masters started for one test.
type Cluster struct {
	backend Backend
	Masters []*Master
}

// Start starts n masters and returns once each answers PING. It fails the
// test if they cannot be started; with Docker, when the image is missing
// and cannot be pulled, the message says how to build one locally.
func Start(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	redistest.SkipShort(t)
	cfg := newConfig(opts)
	c := &Cluster{backend: cfg.backend}
	var nodes []node
	var err error
	switch cfg.backend {
	case Docker:
		nodes, err = startDocker(t, n, &cfg)
	case Process:
		nodes, err = startProcesses(t, n, &cfg)
	default:
		err = fmt.Errorf("cluster: unknown backend %q (want %q or %q)", cfg.backend, Docker, Process)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, nd := range nodes {
		m := &Master{index: i, node: nd}
		p, err := pool.New(nd.addr(), pool.WithConnectTimeout(time.Second),
			pool.WithReadTimeout(2*time.Second), pool.WithWriteTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		m.pool = p
		t.Cleanup(func() { p.Close() })
		c.Masters = append(c.Masters, m)
	}
	return c
}

// newConfig applies opts over the defaults: $QUORUMLOCK_BACKEND, else
// Docker when an engine answers, else Process; $QUORUMLOCK_REDIS_IMAGE,
// else LocalImage when built, else DefaultImage.
func newConfig(opts []Option) config {
	cfg := config{backend: Backend(os.Getenv(BackendEnv)), image: os.Getenv(ImageEnv)}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.image == "" {
		// The image `make redis-image` built, when there is one: no pull.
		cfg.image = DefaultImage
		if localImageExists() {
			cfg.image = LocalImage
		}
	}
	if cfg.backend == "" {
		cfg.backend = Process
		if DockerAvailable() {
			cfg.backend = Docker
		}
	}
	return cfg
}

// Launch is Start for a program (the demo): it returns the cluster and a
// stop that removes its masters, or the error Start would fail a test
// with.
func Launch(n int, opts ...Option) (c *Cluster, stop func(), err error) {
	stop, err = redistest.OutsideTest(func(tb testing.TB) { c = Start(tb, n, opts...) })
	return c, stop, err
}

// Backend returns the backend running the masters.
func (c *Cluster) Backend() Backend { return c.backend }

// Addrs returns the masters' addresses, 127.0.0.1:port.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		addrs[i] = m.Addr()
	}
	return addrs
}

// Pools returns one ready pool per master, closed by t.Cleanup.
func (c *Cluster) Pools() []pool.Pool {
	pools := make([]pool.Pool, len(c.Masters))
	for i, m := range c.Masters {
		pools[i] = m.pool
	}
	return pools
}

// HealAll resumes, heals and starts every master, so each is up and
// reachable again.
func (c *Cluster) HealAll() error {
	var errs []error
	for _, m := range c.Masters {
		errs = append(errs, m.Heal())
	}
	return errors.Join(errs...)
}

// Master is one master of a Cluster. Its fault controls are safe for
// concurrent use and return an error rather than failing the test, so a
// nemesis goroutine can use them. Controls are idempotent: pausing a paused
// master does nothing.
type Master struct {
	index int
	node  node
	pool  *pool.RedisPool

	mu          sync.Mutex
	paused      bool
	down        bool
	partitioned bool
}

// Addr returns the master's address, 127.0.0.1:port; it stays the same
// across restarts.
func (m *Master) Addr() string { return m.node.addr() }

// Pool returns a pool of connections to the master, shared by the test.
func (m *Master) Pool() *pool.RedisPool { return m.pool }

// Do runs one command on a fresh connection with 2s timeouts, for
// inspecting a master from a test.
func (m *Master) Do(cmd string, args ...any) (any, error) {
	c, err := redis.Dial("tcp", m.Addr(), redis.DialConnectTimeout(2*time.Second),
		redis.DialReadTimeout(2*time.Second), redis.DialWriteTimeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(cmd, args...)
}

// State returns whether the master is paused, down and partitioned.
func (m *Master) State() (paused, down, partitioned bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.paused, m.down, m.partitioned
}

// String describes the master and its faults.
func (m *Master) String() string {
	paused, down, part := m.State()
	var faults []string
	if paused {
		faults = append(faults, "paused")
	}
	if down {
		faults = append(faults, "down")
	}
	if part {
		faults = append(faults, "partitioned")
	}
	if clk := m.node.clock(); clk != nil {
		if r := clk.Rate(); r != 1 {
			faults = append(faults, fmt.Sprintf("clock rate %g", r))
		}
		if off := clk.Offset(); off.Abs() >= time.Millisecond {
			faults = append(faults, fmt.Sprintf("clock %+v", off.Round(time.Millisecond)))
		}
	}
	s := fmt.Sprintf("master %d (%s)", m.index, m.Addr())
	if len(faults) > 0 {
		s += " " + strings.Join(faults, ",")
	}
	return s
}

// Pause freezes the master (docker pause, or SIGSTOP): it keeps its
// connections open but answers nothing, like a process in a long pause.
func (m *Master) Pause() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.paused || m.down {
		return nil
	}
	if err := m.node.pause(); err != nil {
		return m.wrap("pause", err)
	}
	m.paused = true
	return nil
}

// Resume continues a paused master.
func (m *Master) Resume() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.resumeLocked()
}

func (m *Master) resumeLocked() error {
	if !m.paused {
		return nil
	}
	if err := m.node.resume(); err != nil {
		return m.wrap("resume", err)
	}
	m.paused = false
	return nil
}

// Kill crashes the master with SIGKILL. Writes it had not persisted are
// lost.
func (m *Master) Kill() error { return m.halt("kill", m.node.kill) }

// Stop shuts the master down cleanly with SIGTERM (it persists, if it
// persists at all).
func (m *Master) Stop() error { return m.halt("stop", m.node.stop) }

func (m *Master) halt(what string, f func() error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil
	}
	if err := m.resumeLocked(); err != nil {
		return err
	}
	if err := f(); err != nil {
		return m.wrap(what, err)
	}
	m.down = true
	return nil
}

// Start starts a killed or stopped master again, on the same address, and
// waits until it answers PING. With WithAOF it keeps what it persisted;
// without, it comes back empty.
func (m *Master) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.startLocked()
}

func (m *Master) startLocked() error {
	if !m.down {
		return nil
	}
	if err := m.node.start(); err != nil {
		return m.wrap("start", err)
	}
	m.down = false
	return nil
}

// Restart crashes the master (SIGKILL) and starts it again.
func (m *Master) Restart() error {
	if err := m.Kill(); err != nil {
		return err
	}
	return m.Start()
}

// Partition cuts the master off from the client (its container leaves the
// cluster's network); it keeps running and keeps its keys. The process
// backend returns ErrUnsupported.
func (m *Master) Partition() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.partitioned {
		return nil
	}
	if err := m.node.partition(); err != nil {
		return m.wrap("partition", err)
	}
	m.partitioned = true
	return nil
}

// Heal undoes every fault: it ends a partition, resumes a paused master
// and starts a stopped one.
func (m *Master) Heal() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.partitioned {
		if err := m.node.heal(); err != nil {
			return m.wrap("heal", err)
		}
		m.partitioned = false
	}
	if err := m.resumeLocked(); err != nil {
		return err
	}
	return m.startLocked()
}

// SetClockRate makes the master's wall clock run at rate times real speed
// from now on (1.005: 0.5 % fast; 1.5: half as fast again), continuing
// from its present reading. Redis expires keys by that clock, so a key
// with a TTL of t lasts t/rate. It needs WithClockFaults, else it returns
// ErrUnsupported. The clock keeps its rate and offset across restarts.
func (m *Master) SetClockRate(rate float64) error {
	clk := m.node.clock()
	if clk == nil {
		return m.wrap("set the clock of", errNoClock)
	}
	if err := clk.SetRate(rate); err != nil {
		return m.wrap("set the clock of", err)
	}
	return nil
}

// JumpClock moves the master's wall clock by d at once (forward for
// d > 0): keys whose expiry falls within the jump expire at once. It needs
// WithClockFaults, else it returns ErrUnsupported.
func (m *Master) JumpClock(d time.Duration) error {
	clk := m.node.clock()
	if clk == nil {
		return m.wrap("jump the clock of", errNoClock)
	}
	if err := clk.Jump(d); err != nil {
		return m.wrap("jump the clock of", err)
	}
	return nil
}

// ResetClock makes the master's wall clock real again (rate 1, no
// offset). Without WithClockFaults it does nothing.
func (m *Master) ResetClock() error {
	if clk := m.node.clock(); clk != nil {
		if err := clk.Reset(); err != nil {
			return m.wrap("reset the clock of", err)
		}
	}
	return nil
}

// ClockRate returns the master's clock rate (1 when real).
func (m *Master) ClockRate() float64 {
	if clk := m.node.clock(); clk != nil {
		return clk.Rate()
	}
	return 1
}

// ClockOffset returns how far the master's wall clock is ahead of the
// real one (negative: behind).
func (m *Master) ClockOffset() time.Duration {
	if clk := m.node.clock(); clk != nil {
		return clk.Offset()
	}
	return 0
}

var errNoClock = fmt.Errorf("%w: the cluster was not started WithClockFaults (process backend)", ErrUnsupported)

func (m *Master) wrap(what string, err error) error {
	return fmt.Errorf("cluster: %s master %d (%s): %w", what, m.index, m.node.addr(), err)
}

// Backends returns the backends a suite should run on: the one named by
// $QUORUMLOCK_BACKEND, else both.
func Backends() []Backend {
	if b := os.Getenv(BackendEnv); b != "" {
		return []Backend{Backend(b)}
	}
	return []Backend{Docker, Process}
}

// ForEachBackend runs f as a subtest per backend of Backends. Where no
// Docker engine answers (and $QUORUMLOCK_BACKEND did not ask for Docker),
// the Docker subtest is skipped with that reason.
func ForEachBackend(t *testing.T, f func(t *testing.T, b Backend)) {
	for _, b := range Backends() {
		t.Run(string(b), func(t *testing.T) {
			if b == Docker && os.Getenv(BackendEnv) == "" && !DockerAvailable() {
				t.Skip("no Docker engine answers on this machine: the docker backend is not run; the process backend is")
			}
			f(t, b)
		})
	}
}
