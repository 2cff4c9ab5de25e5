package redlock_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/stoptest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// stoppedClientEnv carries the masters' addresses and the path to the
// child process of TestStoppedClient_losesNothingWhileEveryMasterIsUp.
const stoppedClientEnv = "QUORUMLOCK_STOPPED_CLIENT"

// TestStoppedClient_losesNothingWhileEveryMasterIsUp is a busy process
// made exact: the client runs in a child process that the test stops
// (SIGSTOP) for 150 ms every 250 ms, three times its 50 ms per-master
// timeout, while every master answers at once. A stopped process reads no
// reply and fires no timer; when it runs again the replies are waiting in
// its sockets, and its timers and readers race. No acquisition may fail
// and no release go unconfirmed: the masters answered in time, only this
// process was late to read them (docs/design.md, "A busy process is not a
// silent master"). Both transports, N=3.
//
// Before the stall evidence (stall.go) and the pooled transport's longer
// reads, the pooled transport failed 21-25 acquisitions and left 20-22
// releases unconfirmed per run here, the pipelined one failed 4.
func TestStoppedClient_losesNothingWhileEveryMasterIsUp(t *testing.T) {
	if spec := os.Getenv(stoppedClientEnv); spec != "" {
		stoppedClientChild(t, spec)
		return
	}
	servers := redistest.Start(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	for _, path := range []string{"pipelined", "pooled"} {
		t.Run(path, func(t *testing.T) {
			res, stops := stoptest.Run(t, stoptest.Child{
				Test:  "TestStoppedClient_losesNothingWhileEveryMasterIsUp",
				Args:  []string{"-test.short"},
				Env:   stoppedClientEnv + "=" + path + ";" + strings.Join(addrs, ","),
				Every: 100 * time.Millisecond, Stop: 150 * time.Millisecond, MinStops: 5,
			})
			t.Logf("%s: %d cycles, %d stops of 150 ms; failed acquisitions %d, unconfirmed releases %d",
				path, res.Cycles, stops, res.FailedAcquire, res.UnconfirmedRelease)
			if res.FailedAcquire+res.UnconfirmedRelease > 0 {
				t.Errorf("with every master up, a stopped client failed %d acquisitions and left %d releases unconfirmed; first errors: %q",
					res.FailedAcquire, res.UnconfirmedRelease, res.Errors)
			}
			// A release returns at a quorum: the last master's may still be
			// on its way, or finished in the background.
			for _, s := range servers {
				if t.Failed() {
					break
				}
				var n any
				if !redistest.Within(10*time.Second, func() bool {
					var err error
					n, err = s.Do("DBSIZE")
					if err != nil {
						t.Fatal(err)
					}
					return n.(int64) == 0
				}) {
					t.Errorf("%s holds %d keys 10 s after the child released everything", s.Addr(), n)
				}
			}
		})
	}
}

// stoppedClientChild runs in the child: 16 goroutines lock and unlock
// keys of their own for 2 s (stoptest.Churn), then it reports what failed.
func stoppedClientChild(t *testing.T, spec string) {
	path, list, _ := strings.Cut(spec, ";")
	c, err := redigo.NewFromAddrs(strings.Split(list, ","), redlock.WithTimeout(50*time.Millisecond),
		redigo.WithPipelining(path == "pipelined"))
	if err != nil {
		t.Fatal(err)
	}
	res := stoptest.Churn(c, 2*time.Second)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	stoptest.Report(res)
}
