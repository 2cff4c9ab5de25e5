package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/ident"
	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// design.md ("A busy process reads the probe late"): a master whose INFO
// completed unanswered has nothing in flight, so its grant counts for
// nothing in that round at once; the round does not wait the round's
// bound (the per-master timeout and a second more) for it. Master 2's
// INFO fails at its deadline while it grants; master 1 refuses; the
// first call fails within the timeout and ident.ProbeGrace.
func TestIdentity_unansweredProbeDoesNotHoldTheRound(t *testing.T) {
	servers := redistest.Start(t, 3)
	const timeout = 300 * time.Millisecond
	const slack = 500 * time.Millisecond
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			key := "lateprobe:unanswered:" + p.name
			if _, err := servers[1].Do("SET", key, "another-holder", "PX", 600000); err != nil {
				t.Fatal(err)
			}
			defer servers[1].Do("DEL", key)
			c := lateProbeClient(t, servers, p.pipelined, timeout, 0)
			silent := &infoSilent{Transport: c.masters[2].t}
			c.masters[2].t = silent
			start := time.Now()
			l, err := c.TryAcquire(context.Background(), key, WithTTL(time.Minute))
			took := time.Since(start)
			if err == nil {
				_ = l.Release(context.Background())
				t.Fatal("acquired on the grant of a master whose probe was not answered")
			}
			if !errors.Is(err, ErrNotAcquired) || !strings.Contains(err.Error(), "granted but not counted") {
				t.Errorf("%v, want ErrNotAcquired naming master 2's grant not counted", err)
			}
			t.Logf("took %v", took)
			if bound := timeout + ident.ProbeGrace + slack; took > bound {
				t.Errorf("the first call took %v, want at most %v: nothing was in flight", took, bound)
			}
			leftover.None(t, []*redistest.Server{servers[0], servers[2]}, key)
		})
	}
}
