package redigot

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/stall"
)

// A command whose round waits longer than the per-master timeout (the
// adaptive bound, a release's wait) is sent to a master that has been
// silent for more than the timeout but less than that wait: the master
// is as slow as the round allows, not hung. Its reply, read after the
// round's deadline, is still read (up to lateBound past it), so that the
// Client notes how long the master took and its adaptive bound follows
// the host. Before, such a command was read only one timeout past its
// deadline, as if its master were hung: on a loaded host the late
// answers that should have raised the bound were never read, and the
// bound stayed below the masters' round trips.
func TestPooled_replyOfAMasterSilentForLessThanTheWaitIsReadLate(t *testing.T) {
	redistest.SkipShort(t)
	const timeout = 50 * time.Millisecond
	s := redistest.StartOne(t)
	p := newPooled(s.Addr(), s.Pool(), nil, timeout, stall.New(clock.Real()))
	defer p.Close()
	if o := <-pooledSend(p, "pooled:slowhost:warm", false, timeout); o.err != nil {
		t.Fatal(o.err)
	}
	paused(t, s)
	first := pooledSend(p, "pooled:slowhost:1", false, timeout)
	if !redistest.Within(2*time.Second, func() bool { return p.Silence() >= 2*timeout }) {
		t.Fatal("the stopped master never became silent")
	}
	// Silent for two timeouts; the command's round waits ten.
	const wait = 10 * timeout
	slow := pooledSend(p, "pooled:slowhost:2", false, wait)
	// The master answers three timeouts past the command's deadline:
	// after one timeout's grace, within lateBound.
	resume := time.AfterFunc(wait+3*timeout, func() { _ = s.Resume() })
	defer resume.Stop()
	if o := <-slow; o.err != nil {
		t.Errorf("a master silent for %v, less than the command's %v wait, answered 3 timeouts past the deadline: %v; want the reply read", 2*timeout, wait, o.err)
	}
	<-first
}
