package redlock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// A master down for 5 s under three clients contending for one key: each
// client logs at most two lines per master per change of its state (it
// fails, it answers again; releases it missed are counted in between).
func TestOutageLog_underContentionOneLinePerChange(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		const clients = 3
		bufs := make([]*syncBuffer, clients)
		cs := make([]*redlock.Client, clients)
		for i := range cs {
			bufs[i] = new(syncBuffer)
			cs[i] = rs.client(t, path, redlock.WithLogger(slog.New(slog.NewJSONHandler(bufs[i], nil))))
		}
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		var wg sync.WaitGroup
		var mu sync.Mutex
		granted := 0
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					l, err := c.Acquire(ctx, "contended", redlock.WithTTL(time.Second), redlock.WithWait(200*time.Millisecond))
					if err != nil {
						continue
					}
					mu.Lock()
					granted++
					mu.Unlock()
					_ = l.Release(context.Background())
				}
			}()
		}
		down := rs.servers[1]
		if err := down.Kill(); err != nil {
			t.Fatal(err)
		}
		<-time.After(5 * time.Second) // the outage
		if err := down.Start(); err != nil {
			t.Fatal(err)
		}
		back := redistest.WaitFor(ctxT(t), func() bool {
			for _, b := range bufs {
				if !strings.Contains(b.String(), "master answering again") {
					return false
				}
			}
			return true
		})
		stop()
		wg.Wait()
		for _, c := range cs {
			c.Close()
		}
		if !back {
			t.Errorf("not every client logged the master answering again")
		}
		if granted == 0 {
			t.Fatal("no lock was granted during the test")
		}
		for i, b := range bufs {
			perMaster := map[string][]string{}
			for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
				if line == "" {
					continue
				}
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("client %d: bad log line %q", i, line)
				}
				m := fmt.Sprint(rec["master"])
				perMaster[m] = append(perMaster[m], fmt.Sprint(rec["msg"]))
			}
			var ms []string
			for m := range perMaster {
				ms = append(ms, m)
			}
			sort.Strings(ms)
			for _, m := range ms {
				lines := perMaster[m]
				// Master 1 changes state twice; the others never; the
				// client closes once.
				limit := 0
				switch m {
				case "1":
					limit = 2 * 2
				case "<nil>":
					limit = 1
				}
				if len(lines) > limit {
					t.Errorf("client %d, master %s: %d lines, want at most %d: %q", i, m, len(lines), limit, lines)
				}
			}
			t.Logf("client %d: %v", i, perMaster)
		}
	})
}

// A lock that never reached a master (it refused the connection) leaves
// nothing there: its release is not retried there, and no warning says a
// key stays there until its TTL.
func TestOutageLog_releaseNeverSentToARefusingMasterIsNotWarnedAbout(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 3)
		var buf syncBuffer
		c := rs.client(t, path, redlock.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))), redlock.WithTimeout(100*time.Millisecond))
		ctx := ctxT(t)
		if err := rs.servers[2].Kill(); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			l, err := c.Acquire(ctx, "k", redlock.WithTTL(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// Past every TTL: a retry given up would have been logged.
		deadline := time.Now().Add(500 * time.Millisecond)
		redistest.WaitFor(ctx, func() bool { return time.Now().After(deadline) })
		c.Close()
		if out := buf.String(); strings.Contains(out, "did not confirm") || strings.Contains(out, "client closed with") {
			t.Errorf("warned about releases that never reached the master:\n%s", out)
		}
	})
}
