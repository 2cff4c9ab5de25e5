package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// runIDLiar is a master's transport that answers INFO with a run_id of
// its choosing, as a hostile or broken master (or proxy) may.
type runIDLiar struct {
	Transport
	runID string
}

func (l *runIDLiar) Send(cmd *Command) {
	if cmd.Name != "INFO" {
		l.Transport.Send(cmd)
		return
	}
	lie := *cmd
	lie.To, lie.Done = nil, func(_ any, err error, info SendInfo) {
		if err != nil {
			cmd.Complete(nil, err, info)
			return
		}
		cmd.Complete([]byte("# Server\r\nrun_id:"+l.runID+"\r\n"), nil, info)
	}
	l.Transport.Send(&lie)
}

// Two distinct servers that report one run_id look like one server listed
// twice: the Client cannot tell a lie from the truth, so it refuses every
// call that talks to the masters with ErrInvalid, from the first, and the
// first call's grants are rolled back everywhere. Refusing is safe; what
// must not happen is a lock acquired or left behind.
func TestIdentity_twoServersReportingOneRunIDRefuseEveryCall(t *testing.T) {
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			servers := redistest.Start(t, 3)
			addrs := []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}
			c, err := newRedigoFromAddrs(addrs, withPipelining(p.pipelined), WithTimeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			same := strings.Repeat("ab", 20)
			c.masters[0].t = &runIDLiar{Transport: c.masters[0].t, runID: same}
			c.masters[1].t = &runIDLiar{Transport: c.masters[1].t, runID: same}
			const key = "liar"
			for i := range 3 {
				l, err := c.TryAcquire(context.Background(), key, WithTTL(time.Minute))
				if err == nil {
					_ = l.Release(context.Background())
					t.Fatalf("call %d: acquired with two masters reporting one run_id", i+1)
				}
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), same) {
					t.Fatalf("call %d: %v, want an error matching ErrInvalid naming run_id %s", i+1, err, same)
				}
			}
			leftover.Within(t, 5*time.Second, servers, key)
		})
	}
}
