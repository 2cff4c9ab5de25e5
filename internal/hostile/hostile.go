// Package hostile runs fake Redis masters that misbehave on purpose, on
// 127.0.0.1, for tests of what the client does with bytes no real master
// sends: huge length headers, arrays nested without end, a reply trickled
// a byte at a time, a TLS port that never finishes its handshake. Each
// master reads the commands it is sent (RESP arrays of bulk strings) and
// answers each with its Answer; it stops, and its goroutines end, when the
// test ends. A Proxy stands in front of a real redis-server instead and
// misbehaves only where a test's hook says.
package hostile

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
	"time"
)

// Answer writes the answer to one command (its name upper-cased, then its
// arguments). It returns an error to end the connection. quit closes when
// the test ends: an Answer that streams without end must stop then.
type Answer func(w io.Writer, cmd []string, quit <-chan struct{}) error

// Start runs a master that answers every command with answer, and returns
// its address.
func Start(t testing.TB, answer Answer) string {
	t.Helper()
	return Serve(t, func(c net.Conn, quit <-chan struct{}) {
		r := bufio.NewReader(c)
		for {
			cmd, err := ReadCommand(r)
			if err != nil {
				return
			}
			if err := answer(c, cmd, quit); err != nil {
				return
			}
		}
	})
}

// Silent starts a master that accepts connections and reads what it is
// sent, but never writes a byte: a TLS client's handshake never ends. It
// returns the address.
func Silent(t testing.TB) string {
	t.Helper()
	return Serve(t, func(c net.Conn, _ <-chan struct{}) {
		_, _ = io.Copy(io.Discard, c)
	})
}

// Serve accepts connections on 127.0.0.1 and runs serve for each on its
// own goroutine until the test ends, when it closes quit and the
// connections and waits for the goroutines. It returns the address.
func Serve(t testing.TB, serve func(c net.Conn, quit <-chan struct{})) string {
	t.Helper()
	return listen(t, func(c net.Conn, quit <-chan struct{}) func() {
		return func() { serve(c, quit) }
	}).ln.Addr().String()
}

// listen starts a master whose accept loop calls accepted for each
// connection, in the order they came, and runs the function it returns on
// the connection's own goroutine.
func listen(t testing.TB, accepted func(c net.Conn, quit <-chan struct{}) func()) *master {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &master{ln: ln, accepted: accepted, quit: make(chan struct{}), conns: map[net.Conn]bool{}}
	t.Cleanup(m.stop)
	m.wg.Add(1)
	go m.accept()
	return m
}

type master struct {
	ln       net.Listener
	accepted func(c net.Conn, quit <-chan struct{}) func()
	quit     chan struct{}
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool
}

func (m *master) stop() {
	m.mu.Lock()
	close(m.quit)
	for c := range m.conns {
		c.Close()
	}
	m.mu.Unlock()
	m.ln.Close()
	m.wg.Wait()
}

func (m *master) accept() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		m.mu.Lock()
		select {
		case <-m.quit:
			m.mu.Unlock()
			c.Close()
			return
		default:
		}
		m.conns[c] = true
		m.wg.Add(1)
		m.mu.Unlock()
		serve := m.accepted(c, m.quit)
		go func() {
			defer m.wg.Done()
			serve()
			m.mu.Lock()
			delete(m.conns, c)
			m.mu.Unlock()
			c.Close()
		}()
	}
}

// ReadCommand reads one command, an array of bulk strings, with the name
// upper-cased.
func ReadCommand(r *bufio.Reader) ([]string, error) {
	n, err := header(r, '*')
	if err != nil {
		return nil, err
	}
	cmd := make([]string, 0, n)
	for i := 0; i < n; i++ {
		size, err := header(r, '$')
		if err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		cmd = append(cmd, string(b[:size]))
	}
	if len(cmd) > 0 {
		cmd[0] = strings.ToUpper(cmd[0])
	}
	return cmd, nil
}

// maxLen bounds a command's length headers (as Redis's proto-max-bulk-len
// does by default): the commands come from the client under test, which
// may send a key of many megabytes on purpose.
const maxLen = 512 << 20

func header(r *bufio.Reader, kind byte) (int, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 3 || line[0] != kind {
		return 0, fmt.Errorf("hostile: want a %q header, got %q", kind, line)
	}
	n, err := strconv.Atoi(strings.TrimSuffix(line[1:], "\r\n"))
	if err != nil || n < 0 || n > maxLen {
		return 0, errors.New("hostile: bad length")
	}
	return n, nil
}

// Reply answers every command with the same bytes.
func Reply(b string) Answer {
	return func(w io.Writer, _ []string, _ <-chan struct{}) error {
		_, err := io.WriteString(w, b)
		return err
	}
}

// Stream answers the first command with head, then chunk over and over
// until the client stops reading or the test ends.
func Stream(head, chunk string) Answer {
	return func(w io.Writer, _ []string, quit <-chan struct{}) error {
		if _, err := io.WriteString(w, head); err != nil {
			return err
		}
		buf := []byte(strings.Repeat(chunk, max(1, 64<<10/len(chunk))))
		for {
			select {
			case <-quit:
				return io.EOF
			default:
			}
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
	}
}

// Trickle answers the first command with head, then one byte every
// interval until the client hangs up or the test ends.
func Trickle(head string, every time.Duration) Answer {
	return func(w io.Writer, _ []string, quit <-chan struct{}) error {
		if _, err := io.WriteString(w, head); err != nil {
			return err
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return io.EOF
			case <-t.C:
			}
			if _, err := w.Write([]byte{'x'}); err != nil {
				return err
			}
		}
	}
}

// Bulk is s as a RESP bulk string.
func Bulk(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

// Subscriber answers SUBSCRIBE as a master does, then pushes what push
// returns (until it returns "" or the test ends). It acknowledges
// UNSUBSCRIBE, answers PING and ECHO as a subscribed master does, and
// fails every other command (a lock command, a pool's PUNSUBSCRIBE).
func Subscriber(push func(i int, channel string) string) Answer {
	return func(w io.Writer, cmd []string, quit <-chan struct{}) error {
		switch cmd[0] {
		case "SUBSCRIBE":
			var b strings.Builder
			for i, ch := range cmd[1:] {
				b.WriteString("*3\r\n$9\r\nsubscribe\r\n" + Bulk(ch) + ":" + strconv.Itoa(i+1) + "\r\n")
			}
			if _, err := io.WriteString(w, b.String()); err != nil {
				return err
			}
			for i := 0; ; i++ {
				select {
				case <-quit:
					return io.EOF
				default:
				}
				p := push(i, cmd[1])
				if p == "" {
					return nil
				}
				if _, err := io.WriteString(w, p); err != nil {
					return err
				}
			}
		case "UNSUBSCRIBE":
			_, err := io.WriteString(w, "*3\r\n$11\r\nunsubscribe\r\n"+Bulk(cmd[min(1, len(cmd)-1)])+":0\r\n")
			return err
		case "PING":
			_, err := io.WriteString(w, "*2\r\n$4\r\npong\r\n$0\r\n\r\n")
			return err
		case "ECHO":
			_, err := io.WriteString(w, Bulk(cmd[min(1, len(cmd)-1)]))
			return err
		}
		_, err := io.WriteString(w, "-ERR hostile\r\n")
		return err
	}
}
