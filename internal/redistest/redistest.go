// Package redistest starts real redis-server processes on 127.0.0.1 for the
// tests of this module. Each server lives in its own temporary directory and
// is killed by t.Cleanup, and by the kernel if the test binary dies first.
package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/pool"
)

// Server is one redis-server process listening on 127.0.0.1.
type Server struct {
	t    testing.TB
	port int
	dir  string
	args []string
	env  []string // added to the environment of redis-server

	tls *tls.Config // nil for a plain server

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Option adds redis-server configuration, as "--name value" pairs.
type Option func(*[]string)

// WithConfig passes "--name value" to redis-server.
func WithConfig(name string, values ...string) Option {
	return func(args *[]string) { *args = append(append(*args, "--"+name), values...) }
}

// WithArgs passes raw arguments to redis-server.
func WithArgs(args ...string) Option {
	return func(a *[]string) { *a = append(*a, args...) }
}

// WithEnv adds "NAME=value" variables to redis-server's environment (a
// preloaded library, say: package clockfault). They are kept apart from
// the arguments by a prefix no argument has.
func WithEnv(vars ...string) Option {
	return func(a *[]string) {
		for _, v := range vars {
			*a = append(*a, envPrefix+v)
		}
	}
}

// envPrefix marks an environment variable among an option's arguments.
const envPrefix = "\x00env:"

// WithAOF turns on the append-only file with appendfsync always, so a
// restarted server keeps its keys.
func WithAOF() Option {
	return func(args *[]string) {
		*args = append(*args, "--appendonly", "yes", "--appendfsync", "always")
	}
}

// ServerEnv names the environment variable that, when set, is the
// redis-server binary the tests run instead of the one on $PATH (set it
// to a path that does not exist to check that `go test -short` needs no
// Redis).
const ServerEnv = "QUORUMLOCK_REDIS_SERVER"

// Binary returns the path of redis-server, failing the test with what to
// install when it is missing. Under -short it skips the test: see
// SkipShort.
func Binary(t testing.TB) string {
	t.Helper()
	SkipShort(t)
	p, err := lookPath()
	if err != nil {
		t.Fatalf("redis-server is not installed: run `apt-get install -y redis-server` (tests need real Redis), or run the unit tests only with `go test -short`: %v", err)
	}
	return p
}

func lookPath() (string, error) {
	if p := os.Getenv(ServerEnv); p != "" {
		return exec.LookPath(p)
	}
	return exec.LookPath("redis-server")
}

// SkipShort skips a test that needs real Redis under -short, saying so:
// `go test -short ./...` runs the unit tests (the quorum logic on
// in-memory masters and the fake clock) and needs no redis-server. Every
// helper that starts Redis calls it; outside a test (Launch) it does
// nothing.
func SkipShort(t testing.TB) {
	t.Helper()
	if _, outside := t.(*launchTB); outside || !testing.Testing() || !testing.Short() {
		return
	}
	t.Skip("needs real Redis: skipped under -short (run without -short to start redis-server masters)")
}

// ShortExamples is for the TestMain of a package whose examples run on
// real Redis, before anything else: under -short it leaves the examples
// out (an example cannot skip), says so on stderr, and reports true.
func ShortExamples() bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	if !testing.Short() {
		return false
	}
	skip := "^Example"
	if old := flag.Lookup("test.skip").Value.String(); old != "" {
		skip = old + "|" + skip
	}
	if err := flag.Set("test.skip", skip); err != nil {
		panic(err)
	}
	fmt.Fprintln(os.Stderr, "redistest: -short: the examples need real Redis and are not run")
	return true
}

// Start starts n servers and returns them once each answers PING.
func Start(t testing.TB, n int, opts ...Option) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = StartOne(t, opts...)
	}
	return servers
}

// StartOne starts a server and returns it once it answers PING.
func StartOne(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin := Binary(t)
	var extra []string
	for _, o := range opts {
		o(&extra)
	}
	s := &Server{t: t, dir: t.TempDir()}
	t.Cleanup(func() { s.stop(syscall.SIGKILL) })
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort(t)
		if err != nil {
			t.Fatalf("redistest: no free port: %v", err)
		}
		s.port = port
		extraHere := make([]string, 0, len(extra))
		s.env = s.env[:0]
		for _, a := range extra {
			if v, ok := strings.CutPrefix(a, envPrefix); ok {
				s.env = append(s.env, v)
				continue
			}
			if a == portPlaceholder {
				a = strconv.Itoa(port)
			}
			extraHere = append(extraHere, a)
		}
		s.args = append([]string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--dir", s.dir,
			"--logfile", filepath.Join(s.dir, "redis.log"),
			"--daemonize", "no",
		}, extraHere...)
		s.tls = tlsConfigFor(s.args)
		if lastErr = s.spawn(bin); lastErr == nil {
			return s
		}
	}
	t.Fatalf("redistest: redis-server did not start: %v", lastErr)
	return nil
}

func (s *Server) spawn(bin string) error {
	cmd := exec.Command(bin, s.args...)
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, log)
		default:
		}
		c, err := s.dial(time.Second)
		if err == nil {
			_, err = c.Do("PING")
			if err == nil {
				err = s.ours(c)
				c.Close()
				if err != nil {
					s.stop(syscall.SIGKILL)
					return err
				}
				return nil
			}
			c.Close()
			// NOAUTH: up, behind a password. LOADING: not ready yet (it
			// is reading its AOF).
			var re redis.Error
			if errors.As(err, &re) && strings.HasPrefix(string(re), "NOAUTH") {
				return nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.stop(syscall.SIGKILL)
	return fmt.Errorf("redis-server on port %d did not answer PING within 10s", s.port)
}

// ours checks, on c, that the server answering on s's port is the one s started
// and not another that took the port first (a test binary of another
// package, picking free ports too): its working directory is s's own.
// A server that does not say (CONFIG refused or renamed) passes.
func (s *Server) ours(c redis.Conn) error {
	kv, cerr := redis.Strings(c.Do("CONFIG", "GET", "dir"))
	if cerr != nil || len(kv) != 2 {
		return nil // a server that does not say passes
	}
	want, lerr := filepath.EvalSymlinks(s.dir)
	if lerr != nil {
		want = s.dir
	}
	if kv[1] != want && kv[1] != s.dir {
		return fmt.Errorf("redis-server on port %d: another server answers there (its dir %q, not %q)", s.port, kv[1], want)
	}
	return nil
}

// dial connects to the server, over TLS for a TLS server.
func (s *Server) dial(timeout time.Duration) (redis.Conn, error) {
	return s.dialConnect(timeout, timeout)
}

// dialConnect is dial with a connect timeout of its own.
func (s *Server) dialConnect(connect, timeout time.Duration) (redis.Conn, error) {
	opts := []redis.DialOption{redis.DialConnectTimeout(connect), redis.DialReadTimeout(timeout), redis.DialWriteTimeout(timeout)}
	if s.tls != nil {
		opts = append(opts, redis.DialUseTLS(true), redis.DialTLSConfig(s.tls))
	}
	return redis.Dial("tcp", s.Addr(), opts...)
}

// Addr returns the server's address, 127.0.0.1:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Pool returns a pool of connections to the server, closed by t.Cleanup.
func (s *Server) Pool(opts ...pool.Option) *pool.RedisPool {
	s.t.Helper()
	p, err := pool.New(s.Addr(), opts...)
	if err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
	s.t.Cleanup(func() { p.Close() })
	return p
}

// Do runs one command on a fresh connection, for checking a server's state
// from a test. It fails the test on a connection error, not on a reply
// error, which it returns.
func (s *Server) Do(cmd string, args ...any) (any, error) {
	s.t.Helper()
	// The connect may take up to 10 s: a server whose accept queue
	// hundreds of a test's clients filled drops the SYN, and the kernel
	// sends it again after 1 and 3 s. Reads and writes keep 2 s.
	c, err := s.dialConnect(10*time.Second, 2*time.Second)
	if err != nil {
		s.t.Fatalf("redistest: dial %s: %v", s.Addr(), err)
	}
	defer c.Close()
	return c.Do(cmd, args...)
}

// Calls returns how many times the server has run cmd (lower case, as
// INFO commandstats names it: "set", "evalsha", "pubsub|numsub"), commands
// run by scripts included.
func (s *Server) Calls(cmd string) int {
	s.t.Helper()
	info, err := redis.String(s.Do("INFO", "commandstats"))
	if err != nil {
		s.t.Fatalf("redistest: INFO commandstats on %s: %v", s.Addr(), err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			if end := strings.IndexByte(rest, ','); end >= 0 {
				rest = rest[:end]
			}
			n, _ := strconv.Atoi(rest)
			return n
		}
	}
	return 0
}

// Run runs a command given as its name and arguments, as a proxy sees
// one (internal/hostile), on its own connection: the command a hook runs
// itself instead of forwarding it.
func (s *Server) Run(cmd []string) (any, error) {
	args := make([]any, len(cmd)-1)
	for i, a := range cmd[1:] {
		args[i] = a
	}
	return s.Do(cmd[0], args...)
}

// WaitAbsent waits up to d for key to be gone from the server, and
// reports whether it is.
func (s *Server) WaitAbsent(key string, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return WaitFor(ctx, func() bool {
		n, err := redis.Int(s.Do("EXISTS", key))
		return err == nil && n == 0
	})
}

// LogTail returns the last n lines redis-server wrote to its log file,
// for an error message; "" when it has written none.
func (s *Server) LogTail(n int) string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Pause stops the process with SIGSTOP: it keeps its sockets but answers
// nothing, like a master frozen by a long pause.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

// Kill ends the process with SIGKILL (a crash) and waits for it to exit.
func (s *Server) Kill() error {
	s.stop(syscall.SIGKILL)
	return nil
}

// Stop ends the process with SIGTERM (a clean shutdown, which writes the
// AOF) and waits for it to exit.
func (s *Server) Stop() error {
	s.stop(syscall.SIGTERM)
	return nil
}

// Start starts a stopped or killed server again on the same port and
// directory. Without WithAOF it comes back empty.
func (s *Server) Start() error {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		return fmt.Errorf("redistest: %s is already running", s.Addr())
	}
	bin, err := lookPath()
	if err != nil {
		return err
	}
	return s.spawn(bin)
}

// Restart kills the process (a crash) and starts it again.
func (s *Server) Restart() error {
	s.stop(syscall.SIGKILL)
	return s.Start()
}

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return fmt.Errorf("redistest: %s is not running", s.Addr())
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redistest: signal %v to %s: %w", sig, s.Addr(), err)
	}
	return nil
}

// stop sends sig (continuing a paused process first) and waits for exit.
func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	<-exited
}

// given holds the ports FreePort has reserved in this process and not yet
// given back.
var given struct {
	sync.Mutex
	ports map[int]bool
}

// FreePort returns a TCP port of 127.0.0.1 that is free now and stays
// reserved for t until t's cleanup, so that a server stopped in the middle
// of a test finds its port again when it restarts.
//
// The port comes from below (or above) the kernel's ephemeral range, which
// outgoing connections and listeners on port 0 draw from: while a server
// is down, neither can take its port. The test processes of one run (go
// test runs packages side by side) share the rest of the range through a
// lock file per port in the temporary directory, held while the port is
// reserved; the kernel lets go of it if the process dies. When the
// ephemeral range leaves no room, the port is drawn from it, reserved the
// same way.
func FreePort(t testing.TB) (int, error) {
	given.Lock()
	defer given.Unlock()
	dir, err := portsDir()
	if err != nil {
		return 0, err
	}
	first, last := reservedSpan()
	if given.ports == nil {
		given.ports = map[int]bool{}
	}
	for try := 0; try < 10000; try++ {
		port, err := candidatePort(first, last)
		if err != nil {
			return 0, err
		}
		if given.ports[port] {
			continue
		}
		f, err := openLockFile(filepath.Join(dir, strconv.Itoa(port)))
		if errors.Is(err, fs.ErrPermission) {
			continue // another user's file this one may not open
		}
		if err != nil {
			return 0, fmt.Errorf("redistest: the lock file of port %d: %w", port, err)
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // another process holds it
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			f.Close() // in use outside the test processes
			continue
		}
		l.Close()
		given.ports[port] = true
		t.Cleanup(func() {
			given.Lock()
			delete(given.ports, port)
			given.Unlock()
			f.Close()
		})
		return port, nil
	}
	if first == 0 {
		return 0, errors.New("redistest: no free port: the kernel's ephemeral range leaves no room outside it, and port 0 gave none free")
	}
	return 0, fmt.Errorf("redistest: no free port in %d-%d", first, last)
}

// openLockFile opens a port's lock file, making it if it is missing.
// Read-only, since flock needs no write access; and without O_CREATE on
// a file that exists, which a sticky directory refuses for another
// user's file where the kernel protects such files (fs.protected_regular).
func openLockFile(name string) (*os.File, error) {
	for {
		f, err := os.Open(name)
		if !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
		f, err = os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
		// Made by another process meanwhile: open it.
	}
}

// portsDir is the directory of the ports' lock files: one for every user
// of the machine (world-writable and sticky, as the temporary directory
// is), so that test runs of different users skip each other's ports; or,
// when another user made it and it is closed to this one, one of this
// user's own. Called with given locked.
func portsDir() (string, error) {
	dir := filepath.Join(os.TempDir(), "quorumlock-ports")
	if err := os.Mkdir(dir, 0o777); err == nil {
		// Mkdir's mode passes through the umask; the sticky bit does not.
		if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
			return "", fmt.Errorf("redistest: the ports' lock files: %w", err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("redistest: the ports' lock files: %w", err)
	} else {
		// Made by an earlier version, or by this user with another
		// umask: open it to everyone where this user may (its owner).
		_ = os.Chmod(dir, 0o777|os.ModeSticky)
	}
	if syscall.Access(dir, 0o2|0o1) == nil { // W_OK|X_OK
		return dir, nil
	}
	own := fmt.Sprintf("%s-%d", dir, os.Getuid())
	if err := os.MkdirAll(own, 0o755); err != nil {
		return "", fmt.Errorf("redistest: the ports' lock files: %w", err)
	}
	return own, nil
}

// reservedSpan is the span FreePort draws from: the ports between 10000
// and the ephemeral range, or above it, whichever holds at least 2048;
// 0, 0 when neither does, or the range cannot be read.
func reservedSpan() (first, last int) {
	lo, hi, ok := ephemeralRange()
	switch {
	case !ok:
		return 0, 0
	case lo-1-10000 >= 2048:
		return 10000, lo - 1
	case 65535-(hi+1) >= 2048:
		return hi + 1, 65535
	}
	return 0, 0
}

// ephemeralRange is the kernel's range of ports for outgoing connections
// and listeners on port 0; ok is false when it cannot be read.
func ephemeralRange() (lo, hi int, ok bool) {
	var a, z int
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	if _, err := fmt.Sscan(string(b), &a, &z); err != nil {
		return 0, 0, false
	}
	return a, z, true
}

// candidatePort picks a port in first..last at random, or, when the span
// is empty, one the kernel hands out for port 0.
func candidatePort(first, last int) (int, error) {
	if first > 0 {
		return first + rand.IntN(last-first+1), nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("redistest: not a TCP address")
	}
	return addr.Port, nil
}

// WaitFor polls cond every few milliseconds until it holds or ctx ends, for
// state that settles asynchronously (a straggling command on one master).
func WaitFor(ctx context.Context, cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Launch starts n servers outside any test, for TestMain and examples. It
// returns their addresses and a function that stops them all.
func Launch(n int, opts ...Option) (addrs []string, stop func(), err error) {
	servers, stop, err := LaunchServers(n, opts...)
	for _, s := range servers {
		addrs = append(addrs, s.Addr())
	}
	return addrs, stop, err
}

// LaunchServers is Launch returning the servers, for programs (the demo)
// that pause and kill them. Outside a test, a server method that fails
// panics; the demo lets that end it.
func LaunchServers(n int, opts ...Option) (servers []*Server, stop func(), err error) {
	stop, err = OutsideTest(func(tb testing.TB) { servers = Start(tb, n, opts...) })
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: %w", err)
	}
	return servers, stop, nil
}

// OutsideTest runs f, written for a test (it calls Start, say), in a
// program: f's Fatal ends f with an error, and stop runs what f registered
// with Cleanup, in reverse order.
func OutsideTest(f func(tb testing.TB)) (stop func(), err error) {
	lt := &launchTB{}
	defer func() {
		if r := recover(); r != nil {
			lt.cleanup()
			if _, ok := r.(launchFailure); !ok {
				panic(r)
			}
			stop, err = nil, errors.New(lt.msg)
		}
	}()
	f(lt)
	return lt.cleanup, nil
}

// launchTB is the little of testing.TB that Start needs, outside a test.
type launchTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	dirs     []string
	msg      string
}

type launchFailure struct{}

func (l *launchTB) Helper() {}
func (l *launchTB) Cleanup(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cleanups = append(l.cleanups, f)
}
func (l *launchTB) TempDir() string {
	d, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		l.Fatalf("%v", err)
	}
	l.mu.Lock()
	l.dirs = append(l.dirs, d)
	l.mu.Unlock()
	return d
}
func (l *launchTB) Fatalf(format string, args ...any) {
	l.msg = fmt.Sprintf(format, args...)
	panic(launchFailure{})
}
func (l *launchTB) Fatal(args ...any) {
	l.msg = fmt.Sprint(args...)
	panic(launchFailure{})
}
func (l *launchTB) Logf(string, ...any) {}
func (l *launchTB) Log(...any)          {}
func (l *launchTB) cleanup() {
	l.mu.Lock()
	fs, dirs := l.cleanups, l.dirs
	l.cleanups, l.dirs = nil, nil
	l.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	for _, d := range dirs {
		os.RemoveAll(d)
	}
}

// RunWithExamples is the TestMain of a package whose examples use three
// masters: it sets *masters to their addresses (none under -short:
// ShortExamples), runs m, stops them, and, when the tests passed, fails
// if they left goroutines behind (goleak). It returns the exit code.
func RunWithExamples(m *testing.M, masters *[]string) int {
	stop := func() {}
	if !ShortExamples() {
		addrs, stopMasters, err := Launch(3)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		*masters, stop = addrs, stopMasters
	}
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests: %v\n", err)
			code = 1
		}
	}
	return code
}
