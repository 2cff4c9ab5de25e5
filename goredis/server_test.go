package goredis

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// server is a throwaway redis-server on 127.0.0.1 for one test, killed by
// t.Cleanup (and by the kernel if the test binary dies first). The core
// module's internal/redistest cannot be imported from this module.
type server struct {
	t    testing.TB
	addr string
	cmd  *exec.Cmd
}

// startServer starts a redis-server on a free port and returns once it
// answers PING.
func startServer(t testing.TB) *server {
	t.Helper()
	s, err := launchServer(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s.t = t
	t.Cleanup(s.kill)
	return s
}

// launchServer starts a redis-server on a free port of 127.0.0.1, its
// files in dir, and returns once it answers PING. The caller kills it.
func launchServer(dir string) (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (tests need real Redis): %w", err)
	}
	for attempt := 0; attempt < 5; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cmd := exec.Command(bin,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"), "--daemonize", "no")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		s := &server{addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd}
		if s.waitPing(5 * time.Second) {
			return s, nil
		}
		s.kill()
	}
	return nil, errors.New("redis-server did not start")
}

func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// stop freezes the server (SIGSTOP) until t ends or cont is called.
func (s *server) stop() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatal(err)
	}
}

func (s *server) cont() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

func (s *server) waitPing(d time.Duration) bool {
	return poll(d, func() bool {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err = c.Write([]byte("PING\r\n")); err != nil {
			return false
		}
		line, rerr := bufio.NewReader(c).ReadString('\n')
		return rerr == nil && line == "+PONG\r\n"
	})
}

// poll checks cond every few milliseconds until it holds (true) or d has
// passed (false): how a test waits for state that settles
// asynchronously, never with a fixed sleep.
func poll(d time.Duration, cond func() bool) bool {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		<-tick.C
	}
	return true
}
