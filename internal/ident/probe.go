package ident

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/resp"
	"github.com/quorumlock/quorumlock/transport"
)

// probe starts probing masters idx in the background, then records what
// they answered and calls done (if not nil). It reports false, starting
// nothing, when the client is closed. id.mu is held.
func (id *Identity) probe(idx []int, done func()) bool {
	if !id.host.AddWorker() {
		return false
	}
	now := time.Now()
	for _, i := range idx {
		id.tried[i], id.probing[i] = now, true
		id.asking[i]++ // before Send, which may complete it at once
	}
	go func() {
		defer id.host.WorkerDone()
		id.askRunIDs(idx)
		id.mu.Lock()
		if done != nil {
			id.retryAt.Store(time.Now().Add(identifyRetry).UnixNano())
		}
		id.mu.Unlock()
		if done != nil {
			done()
		}
	}()
	return true
}

// probeResult is one master's answer to the probe.
type probeResult struct {
	runID string
	final bool // runID is known, or the master cannot be identified
}

// recordLocked records master i's probe and looks for a master with the
// same run_id. id.mu is held.
func (id *Identity) recordLocked(i int, r probeResult) {
	id.ids[i], id.final[i] = r.runID, r.final
	if r.runID != "" {
		for j, other := range id.ids {
			if j != i && other == r.runID {
				a, b := min(i, j), max(i, j)
				err := fmt.Errorf("%w: masters %d (%s) and %d (%s) are the same Redis server (run_id %s): "+
					"a master listed twice counts twice toward a quorum; list each server once",
					id.cfg.Invalid, a, id.cfg.Addrs[a], b, id.cfg.Addrs[b], r.runID)
				id.dup.CompareAndSwap(nil, &dupError{err})
				break
			}
		}
	}
	settled := true
	for _, f := range id.final {
		settled = settled && f
	}
	id.settled.Store(settled)
}

// probeCompleter receives a probe command's outcome (transport.Completer)
// and records it (Identity.probeAnswered), late too, then tells the probe
// (ch). A transport that completes a command twice (it breaks its
// contract) is heard once.
type probeCompleter struct {
	i    int
	ch   chan<- int
	done atomic.Bool
	// id and sent: the probe's answer, read late too, is a round trip
	// for the adaptive bound (Host.NoteAnswer), the first a Client sees.
	id   *Identity
	sent time.Time
}

var _ transport.Completer = (*probeCompleter)(nil)

// Complete hands a transport's outcome to the probe (transport.Completer).
func (p *probeCompleter) Complete(reply any, err error, _ transport.SendInfo) {
	if p.done.Swap(true) {
		return
	}
	var rpe transport.ReplyError
	if err == nil || errors.As(err, &rpe) {
		p.id.host.NoteAnswer(p.i, p.sent, time.Now())
	}
	p.id.probeAnswered(p.i, probeAnswerResult(reply, err))
	p.ch <- p.i // buffered, one per command: never blocks
}

// probeAnswered records master i's answer to an INFO of a probe, whenever
// it comes: one read after the probe stopped waiting (a busy process
// reads late) identifies the master as well, and a round waiting for it
// (Gate) hears of it. A master identified, or known unidentifiable, stays
// so.
func (id *Identity) probeAnswered(i int, r probeResult) {
	id.mu.Lock()
	defer id.mu.Unlock()
	id.asking[i]--
	if r.final && !id.final[i] {
		id.recordLocked(i, r)
	}
	close(id.news)
	id.news = make(chan struct{})
}

// askRunIDs sends INFO server to masters idx through their transports,
// whose answers are recorded as they arrive (probeCompleter), and waits
// for them at most the per-master timeout (and ProbeGrace), or until the
// client closes; then it takes the rest as not answered (asked again
// later), though an answer still in flight is recorded when it comes.
func (id *Identity) askRunIDs(idx []int) {
	ch := make(chan int, len(idx))
	sent := time.Now()
	deadline := sent.Add(id.cfg.Timeout)
	for _, i := range idx {
		cmd := &transport.Command{Name: "INFO", Args: []any{"server"}, Deadline: deadline, Reply: transport.ReplyInfo,
			Grace: id.cfg.Timeout, Resend: true, DropWhenDown: true, To: &probeCompleter{i: i, ch: ch, id: id, sent: sent}}
		id.host.Send(i, cmd)
	}
	heard := make([]bool, len(id.cfg.Addrs))
	defer func() {
		id.mu.Lock()
		for _, i := range idx {
			if !heard[i] {
				id.probing[i] = false
			}
		}
		id.mu.Unlock()
	}()
	// The probe is a client's first traffic, which dials its masters: the
	// round beat tells a dial that timed out in a stall of this process
	// from one the master failed (mux.dialer), as it does for a round.
	id.cfg.Stalls.Rounds.Enter()
	defer id.cfg.Stalls.Rounds.Leave()
	t := time.NewTimer(time.Until(deadline) + ProbeGrace)
	defer t.Stop()
	for range idx {
		select {
		case i := <-ch:
			heard[i] = true
			id.mu.Lock()
			id.probing[i] = false
			id.mu.Unlock()
		case <-t.C:
			return
		case <-id.cfg.Closing:
			id.stopped.Store(true)
			return
		}
	}
}

// probeAnswerResult reads a master's answer to INFO server (untrusted).
func probeAnswerResult(reply any, err error) probeResult {
	if err != nil {
		var rpe transport.ReplyError
		var be *fault.BadBytesError
		var de *fault.DesyncError
		if errors.As(err, &rpe) && notNow(string(rpe)) {
			// "Not now" (a script running, a data set loading): the
			// server answers INFO once that ends, so it is asked again
			// as one that did not answer. Taken for a refusal, one
			// server under two addresses would count twice for good.
			return probeResult{}
		}
		if errors.As(err, &rpe) || errors.As(err, &be) || errors.As(err, &de) || errors.Is(err, fault.ErrPanic) {
			// It answered: an error reply (an ACL without INFO), or bytes
			// no server sends. Not identified, not asked again.
			return probeResult{final: true}
		}
		return probeResult{} // did not answer: ask again later
	}
	if !transport.ReplyInfo.Fits(reply) {
		return probeResult{final: true}
	}
	return probeResult{runID: resp.RunID(reply), final: true}
}

// notNow reports whether an error reply is one a Redis server sends for a
// while and then stops sending (a script or function running past
// busy-reply-threshold, a data set loading, a cluster or replica link
// down, a full client table), rather than a refusal of INFO itself.
func notNow(msg string) bool {
	for _, code := range []string{"BUSY ", "LOADING ", "MASTERDOWN ", "TRYAGAIN ", "CLUSTERDOWN ", "ERR max number of clients reached"} {
		if strings.HasPrefix(msg, code) {
			return true
		}
	}
	return false
}
