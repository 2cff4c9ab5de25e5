package redistest

import (
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/gomodule/redigo/redis"
)

// Monitor records what a server ran, in order, as its MONITOR shows it:
// a command once it ran, the commands of scripts included.
type Monitor struct {
	mu    sync.Mutex
	lines []string
}

// Monitor starts MONITOR on s on a connection of its own, recording until
// the test ends.
func (s *Server) Monitor(t testing.TB) *Monitor {
	t.Helper()
	c, err := redis.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("MONITOR"); err != nil {
		t.Fatal(err)
	}
	m := &Monitor{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			line, err := redis.String(c.Receive())
			if err != nil {
				return
			}
			m.mu.Lock()
			m.lines = append(m.lines, line)
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return m
}

// Lines returns the lines recorded so far that contain every one of subs.
func (m *Monitor) Lines(subs ...string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
next:
	for _, l := range m.lines {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// monitorArg is one argument of a MONITOR line: a quoted string.
var monitorArg = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)

// Commands returns the commands clients sent (not those their scripts
// ran) recorded so far, in order, each as its arguments.
func (m *Monitor) Commands() [][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var cmds [][]string
	for _, line := range m.lines {
		// 1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "…" ...
		_, rest, _ := strings.Cut(line, " [")
		from, rest, _ := strings.Cut(rest, "] ")
		if strings.HasSuffix(from, " lua") {
			continue
		}
		var cmd []string
		for _, a := range monitorArg.FindAllStringSubmatch(rest, -1) {
			cmd = append(cmd, a[1])
		}
		cmds = append(cmds, cmd)
	}
	return cmds
}
