package hostile

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Delay starts a relay on 127.0.0.1 in front of the master at upstream
// that passes commands on at once and holds every chunk of the master's
// replies for delay: a master that answers everything late, its
// throughput intact. It returns the relay's address; it stops when the
// test ends.
func Delay(t testing.TB, upstream string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Add(3)
			go func() { defer wg.Done(); _, _ = io.Copy(u, c); u.Close() }()
			ch := make(chan delayed, 1<<12)
			go func() {
				defer wg.Done()
				defer close(ch)
				for {
					b := make([]byte, 64<<10)
					n, err := u.Read(b)
					if n > 0 {
						ch <- delayed{time.Now().Add(delay), b[:n]}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				defer c.Close()
				for k := range ch {
					time.Sleep(time.Until(k.at))
					if _, err := c.Write(k.b); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// delayed is a chunk of a master's replies and when Delay passes it on.
type delayed struct {
	at time.Time
	b  []byte
}
